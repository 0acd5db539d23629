#pragma once
// Starting one worker process: fork/exec with its own process group, death signal, clean fds and
// signals, stdout/stderr on pipes, and exec errors reported back to the agent through a pipe.
#include <sys/types.h>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ddprun::agent {

// Owns a file descriptor.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1);
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// The environment a worker gets: `base` ("K=V" entries, e.g. the agent's environ) with `overlay`
// on top. Pure; the result is sorted by name.
std::vector<std::string> merge_environment(const std::vector<std::string>& base,
                                           const std::map<std::string, std::string>& overlay);

// The agent's own environment as "K=V" entries.
std::vector<std::string> current_environment();

struct SpawnRequest {
  std::string program;  // path for execve (already resolved through PATH)
  std::vector<std::string> argv;
  std::vector<std::string> env;  // "K=V"
  // Called in the agent right after fork with the worker's pid, which is its process group id.
  std::function<void(pid_t)> forked;
  // CPUs the worker is bound to with sched_setaffinity before exec (--cpu-bind); empty: inherited.
  std::vector<int> cpus;
  // stderr into the stdout pipe, in the order written (Spawned::stderr_fd is then not open).
  bool stderr_to_stdout = false;
  // Signals the program starts with ignored; every other disposition is reset to the default.
  std::vector<int> ignored_signals;
};

struct Spawned {
  pid_t pid = -1;      // also the worker's process group id
  UniqueFd exit_fd;    // readable once the worker has exited (a pidfd, or a pipe: exit_watch.hpp)
  UniqueFd stdout_fd;  // read ends of the worker's stdout/stderr pipes
  UniqueFd stderr_fd;  // not open with SpawnRequest::stderr_to_stdout
};

// Starts the process. Returns once the program was exec'd. Throws Error with a message like
// "no such file: /x/y" or "permission denied: /x/y" (exit code 127/126) when exec failed, or naming
// the CPUs when the binding was refused; the failed child is reaped before throwing.
Spawned spawn_process(const SpawnRequest& req);

// Message and exit code for an exec errno, e.g. (ENOENT, "/x") -> "no such file: /x", 127.
std::pair<std::string, int> describe_exec_error(int err, const std::string& program);

}  // namespace ddprun::agent
