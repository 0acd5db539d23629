#pragma once
// The launcher layer's one error type: a complete one-line message for the user, plus the exit code.
#include <stdexcept>
#include <string>

namespace ddprun::core {

// Exit code for bad input (usage, configuration, malformed Slurm environment).
inline constexpr int kUsageExit = 2;

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, int exit_code = kUsageExit)
      : std::runtime_error(what), exit_code_(exit_code) {}
  int exit_code() const noexcept { return exit_code_; }

 private:
  int exit_code_;
};

}  // namespace ddprun::core
