#pragma once
// Checks of the numbers a user gives that two places read: one function each, so that the resolved
// options (core::resolve), the agent's own options (agent::validate_options) and the plan's job
// (plan_table's check_job) refuse the same values with the same words. Pure: the one-line error, or nullopt;
// each layer throws its own error type.
#include <optional>
#include <string>

namespace ddprun::core {

// --term-timeout, in seconds: 0 or more.
std::optional<std::string> term_timeout_error(double seconds);

// --hang-timeout, in seconds: positive, finite, and at least 1 ms (the agent counts milliseconds).
std::optional<std::string> hang_timeout_error(double seconds);

// --procs-per-replica: at least 1.
std::optional<std::string> procs_per_replica_error(int procs);

// --gpus-per-proc, when given: at least 1 (a job spec's 0 means not given).
std::optional<std::string> gpus_per_proc_error(int gpus);

}  // namespace ddprun::core
