#pragma once
// One worker process on the supervisor's event loop: started with spawn_process, its exit watched
// through Spawned::exit_fd (a pidfd, or a pipe on kernels before 5.3), its stdout and stderr pipes read in
// chunks and split into lines.
#include <sys/types.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "agent/command.hpp"
#include "agent/policy.hpp"
#include "agent/result.hpp"
#include "core/plan.hpp"
#include "log_relay.hpp"

namespace ddprun::agent {

class Proc;

// What a Proc reports, always on the loop's thread.
class ProcListener {
 public:
  virtual void on_line(Proc& p, bool is_err, std::string_view line) = 0;
  // After the lines of one read of some bytes: `open_line` is the line still open (no newline yet,
  // LineSplitter::open_line), "" when none.
  virtual void on_read(Proc& p, bool is_err, std::string_view open_line) = 0;
  // A pipe is closed (or reading was stopped), after its last line.
  virtual void on_eof(Proc& p, bool is_err) = 0;
  virtual void on_exit(Proc& p) = 0;

 protected:
  ~ProcListener() = default;
};

// How a worker ended.
struct ProcEnd {
  bool exited = false;
  ExitStatus status;
  core::FailureTime time{};
  std::chrono::milliseconds duration{0};
  std::chrono::steady_clock::time_point ended{};  // for the settle after a failure (failure_tracker.hpp)
  bool stopped_by_ddprun = false;                 // it ended after teardown had started
  int after_signal = 0;                           // it ended within the grace of this checkpoint signal
};

class Proc {
 public:
  Proc(boost::asio::io_context& io, std::size_t index, const core::Worker& w, std::string host);
  // Kills and reaps a worker still running (only reached that way if something threw), and reaps
  // the zombie of one that ended.
  ~Proc();
  Proc(const Proc&) = delete;
  Proc& operator=(const Proc&) = delete;

  // Throws Error (exit 126/127) when the program cannot be executed. `forked` gets the worker's pid
  // (its process group) right after fork, before it can start anything.
  void start(const ResolvedCommand& cmd, const std::vector<std::string>& env,
             const std::function<void(pid_t)>& forked = {});
  // Arms the exit wait and both reads; `l` must outlive the loop.
  void watch(ProcListener& l);
  // Signals the worker's process group, which outlives its leader while children remain; ESRCH
  // (already gone) is fine.
  void signal_group(int sig) const;
  // A signal for the worker (signal_target): its process, or its whole group.
  void signal(int sig) const;
  // For a start failure elsewhere: SIGKILL and reap now, counted as stopped by ddprun.
  void kill_and_reap();
  // Stops reading pipes that a process outside the group keeps open.
  void stop_reading();

  std::size_t index() const { return index_; }  // position among this node's workers
  const core::Worker& worker() const { return *w_; }
  const std::string& host() const { return host_; }
  pid_t pid() const { return pid_; }
  bool reading(bool is_err) const { return pipe(is_err).open; }
  // Its end for the run's result, without the stderr tail (the relay keeps that).
  WorkerExit exit_record() const;

  ProcEnd end;
  std::string error_file;  // its TORCHELASTIC_ERROR_FILE; "" if none

 private:
  struct Pipe {
    explicit Pipe(boost::asio::io_context& io) : sd(io) {}
    boost::asio::posix::stream_descriptor sd;
    LineSplitter split;
    std::unique_ptr<char[]> buf;
    bool open = false;
  };

  Pipe& pipe(bool is_err) { return is_err ? err_ : out_; }
  const Pipe& pipe(bool is_err) const { return is_err ? err_ : out_; }
  void arm_exit();
  void arm_read(bool is_err);
  void close_pipe(bool is_err);
  void record_exit(const ExitStatus& status);
  void reap();

  std::size_t index_;
  const core::Worker* w_;
  std::string host_;
  pid_t pid_ = -1;
  // An ended worker stays a zombie until the Proc goes (the end of the run): its pid, which is its
  // group's id, cannot be reused meanwhile, so the reaper can never kill another group by that id.
  bool reaped_ = false;
  std::chrono::steady_clock::time_point start_{};
  boost::asio::posix::stream_descriptor exit_fd_;  // Spawned::exit_fd
  Pipe out_;
  Pipe err_;
  ProcListener* listener_ = nullptr;
};

}  // namespace ddprun::agent
