#pragma once
// The agent layer's one error type: a complete one-line message for the user, plus the exit code.
#include <stdexcept>
#include <string>

namespace ddprun::agent {

// Exit codes follow the shell's conventions for commands that cannot be started.
inline constexpr int kCannotExecute = 126;  // found but not executable (permission denied, bad format)
inline constexpr int kNotFound = 127;       // no such file / not in PATH
inline constexpr int kUsage = 2;            // bad agent options

// The exit code of a worker that cannot be started: 127 when its program, script or interpreter is
// not there, 126 for anything else (not executable, a directory, or files, pipes or the process
// ddprun could not make for it), whatever the code of the error that stopped it.
inline constexpr int start_exit_code(int error_code) {
  return error_code == kNotFound ? kNotFound : kCannotExecute;
}

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, int exit_code = kUsage)
      : std::runtime_error(what), exit_code_(exit_code) {}
  int exit_code() const noexcept { return exit_code_; }

 private:
  int exit_code_;
};

}  // namespace ddprun::agent
