#pragma once
// Signals that reach the agent while workers run. A handler writes each signal's number into a
// pipe that the supervisor's io_context reads, so all decisions happen in normal code.
#include <csignal>
#include <vector>

namespace ddprun::agent {

class SignalWatcher {
 public:
  // Installs handlers for `sigs` and ignores SIGPIPE (a closed console must not kill the agent).
  // The previous dispositions come back in the destructor, so the agent can run workers again
  // (restarts). Only one watcher may exist at a time; throws Error otherwise.
  explicit SignalWatcher(const std::vector<int>& sigs);
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  // Non-blocking read end: one byte per signal received.
  int fd() const { return read_fd_; }
  // Reads whatever arrived without waiting; returns the signal numbers in order.
  std::vector<int> drain() const;

 private:
  struct Saved {
    int sig;
    struct sigaction action;
  };
  int read_fd_ = -1;
  int write_fd_ = -1;
  std::vector<Saved> saved_;
};

}  // namespace ddprun::agent
