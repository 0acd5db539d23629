#pragma once
// Checks of the numbers a user gives that two layers read: one function each, so that the resolved
// options (core::resolve) and the agent's own options (agent::validate_options) refuse the same values
// with the same words. Pure: the one-line error, or nullopt; each layer throws its own error type.
#include <optional>
#include <string>

namespace ddprun::core {

// --term-timeout, in seconds: 0 or more.
std::optional<std::string> term_timeout_error(double seconds);

// --hang-timeout, in seconds: positive, finite, and at least 1 ms (the agent counts milliseconds).
std::optional<std::string> hang_timeout_error(double seconds);

}  // namespace ddprun::core
