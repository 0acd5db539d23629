#pragma once
// Signals that reach the agent while workers run. A handler writes each signal's number into a
// pipe that the supervisor's io_context reads, so all decisions happen in normal code. Around the
// runs, the stopping signals can be held: caught and recorded, never fatal.
#include <pthread.h>
#include <atomic>
#include <csignal>
#include <functional>
#include <thread>
#include <vector>

namespace ddprun::agent {

// Every signal blocked for the calling thread, from construction until restore() or the end of the
// scope: around fork, so that no handler of ours runs in the child before it resets them (the child
// sets old() back before exec), and no signal arrives before the parent knows the child's pid.
class AllSignalsBlocked {
 public:
  AllSignalsBlocked() {
    sigset_t all;
    sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &old_);
  }
  ~AllSignalsBlocked() { restore(); }
  AllSignalsBlocked(const AllSignalsBlocked&) = delete;
  AllSignalsBlocked& operator=(const AllSignalsBlocked&) = delete;

  const sigset_t& old() const { return old_; }  // the mask before
  void restore() {
    if (!blocked_) return;
    ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
    blocked_ = false;
  }

 private:
  sigset_t old_{};
  bool blocked_ = true;
};

class SignalWatcher {
 public:
  // Installs handlers for `sigs` and ignores SIGPIPE (a closed console must not kill the agent).
  // The previous dispositions come back in the destructor, so the agent can run workers again
  // (restarts); while the stopping signals are held, that is the hold. A signal the hold recorded
  // before this watcher existed is read from fd() as if it came now, and a stopping signal still
  // unread in fd() when the watcher ends goes back to the hold (keep_stop_signal). Only one watcher
  // may exist at a time; throws Error otherwise.
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

// While the supervisor blocks in the exit barrier (its event loop is not running), a thread of its own
// reads the watcher's pipe: the first stopping signal (scancel, a time limit) calls `on_stop` at once,
// from that thread, so the agent can end the wait instead of sitting out KillWait. Checkpoint signals
// have no worker left to reach here and are dropped.
class StopDuringWait {
 public:
  StopDuringWait(int signal_fd, std::function<void(int sig)> on_stop);
  ~StopDuringWait();
  StopDuringWait(const StopDuringWait&) = delete;
  StopDuringWait& operator=(const StopDuringWait&) = delete;
  // Stops and joins the thread (once `on_stop` has returned); the stopping signal taken, 0 if none.
  int finish();

 private:
  void run();
  int signal_fd_;
  int wake_fd_ = -1;
  std::function<void(int)> on_stop_;
  std::atomic<int> taken_{0};
  std::thread thread_;
};

// Once a run's outcome is decided, no signal may change it, up to the exit itself: srun
// --kill-on-bad-exit TERMs every agent as soon as one exits with the root cause's code, and with the
// default disposition that TERM would make this agent exit 143 instead. hold_stop_signals() makes
// TERM, INT, HUP and QUIT harmless for the whole process: each is caught and the first one kept,
// never fatal. Call it before run_workers, whose watcher takes over and gives the hold back when the
// run ends, so there is no moment between a run and the exit without one. Idempotent.
void hold_stop_signals();
// The first stopping signal caught by the hold and not taken by a watcher; 0 if none.
int held_stop_signal();
// Records `sig` as caught by the hold, unless one was caught already or nothing holds: a stop that
// reached the agent but was handled by nobody (a run's watcher hands back what its loop never read,
// a health check hands back what ended it), so that no restart follows it.
void keep_stop_signal(int sig);
// Ends the hold (before a restart's rendezvous, where a stop must end the agent at once) unless a
// signal was caught: then the hold stays and that signal is returned. 0: released, the dispositions
// from before hold_stop_signals() are back. One atomic step, so no signal falls between the two.
int release_stop_signals();

}  // namespace ddprun::agent
