#pragma once
// What a hang needs around the workers: their heartbeat files, and the native stack of a hung one.
// (A Python worker's stack comes from faulthandler on its own stderr; see the supervisor.)
#include <sys/types.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/hang_watch.hpp"
#include "agent/private_dir.hpp"
#include "agent/result.hpp"
#include "proc.hpp"

namespace ddprun::agent {

// Where each worker's heartbeat file goes: beside its logs under --log-dir, else in a private
// directory made on first use and removed with this object. One object per run (attempt), so
// every worker and attempt gets a fresh file.
class HeartbeatFiles {
 public:
  HeartbeatFiles(std::optional<std::string> log_dir, int requeue, int attempt);
  HeartbeatFiles(const HeartbeatFiles&) = delete;
  HeartbeatFiles& operator=(const HeartbeatFiles&) = delete;

  // Creates rank `rank`'s empty file and returns its path. Throws Error (exit 126) when it cannot.
  std::string create(int rank);
  // The private directory of the files; "" with --log-dir or until made.
  const std::string& private_dir() const { return temp_dir_.path(); }

 private:
  std::optional<std::string> log_dir_;
  int requeue_;
  int attempt_;
  PrivateDir temp_dir_;  // made at the first file without --log-dir
};

// A process's command line (/proc/PID/cmdline), one word each; empty when it cannot be read.
std::vector<std::string> process_argv(pid_t pid);

// `eu-stack -p PID` (elfutils): every thread's native backtrace, stopped after `bound`. Says so
// in the text when eu-stack is not installed or does not finish in time. Blocks the caller.
std::string native_stack(pid_t pid, const std::string& path_env, std::chrono::milliseconds bound);

// Gathers the stacks of hung workers before teardown, by the path of `ddprun stacks` (live_stack):
// a worker whose Python hook registered dumps through it and keeps running; a native worker's stack
// is taken with eu-stack; both are left to the teardown. A Python worker whose hook did not register
// gets SIGABRT (its process only): faulthandler, enabled by PYTHONFAULTHANDLER, writes every
// thread's stack to stderr, which is kept from then on until the worker exited and its stderr
// closed (or kStackDrain after its exit). Not when its command line has -I or -E without
// -X faulthandler (python_flags): that Python ignores PYTHONFAULTHANDLER and SIGABRT would only end
// it; its native stack is taken instead, under a line that says why.
// Everything is bounded: `done` runs at the latest kStackWait after start.
class StackCollector {
 public:
  StackCollector(boost::asio::io_context& io, const std::vector<std::unique_ptr<Proc>>& procs);

  // `stacks_files`: each worker's stacks file (worker index order; live_stacks.hpp).
  void start(const std::vector<HungRank>& hung, bool python, const std::string& path_env,
             const std::vector<std::string>& stacks_files, std::function<void()> done);
  bool collecting() const { return collecting_; }
  bool aborted(std::size_t worker) const;  // ended by our SIGABRT: not a failure of its own
  void line(std::size_t worker, bool is_err, std::string_view text);
  const std::vector<HungWorker>& result() const { return hung_; }

 private:
  struct Target {
    std::size_t worker = 0;
    std::size_t hung = 0;  // index into hung_
    std::optional<std::chrono::steady_clock::time_point> exit_seen;
  };
  void arm();
  bool drained();
  void finish();

  const std::vector<std::unique_ptr<Proc>>& procs_;
  boost::asio::steady_timer timer_;
  std::vector<HungWorker> hung_;
  std::vector<Target> targets_;  // the Python workers we aborted
  std::chrono::steady_clock::time_point started_{};
  std::function<void()> done_;
  bool collecting_ = false;
};

}  // namespace ddprun::agent
