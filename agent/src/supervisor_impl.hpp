#pragma once
// The supervisor's state and lifecycle hooks (supervisor.cpp). Private to the agent library.
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/attempt_context.hpp"
#include "agent/error.hpp"
#include "agent/live_stacks.hpp"
#include "agent/options.hpp"
#include "agent/python_error.hpp"
#include "agent/signals.hpp"
#include "checkpoint_grace.hpp"
#include "failure_tracker.hpp"
#include "hang_guard.hpp"
#include "output_relay.hpp"
#include "proc.hpp"
#include "reaper.hpp"
#include "reporter.hpp"
#include "run_settings.hpp"
#include "status_publisher.hpp"
#include "teardown.hpp"

namespace ddprun::agent::detail {

namespace asio = boost::asio;

// How long telling the other nodes of this node's failure may take: about as long as this node's own
// teardown, so that a stopped, unreachable or slow node 0 adds at most a second to the node's exit.
inline std::chrono::milliseconds publish_bound(std::chrono::milliseconds term_timeout) {
  return term_timeout + std::chrono::milliseconds{1000};
}

// A worker that could not be started, and why.
struct StartFailure {
  std::string message;
  int exit_code;
  std::size_t worker;  // index into the local workers
};

// The orchestrator: owns the event loop and calls the units (Proc, OutputRelay, Teardown,
// FailureTracker, Reporter) at each lifecycle hook. The decisions live in the units and in policy.
class Supervisor final : ProcListener {
 public:
  Supervisor(const std::vector<core::Worker>& local, int world_size, const AgentOptions& opts,
             const AttemptContext& attempt, Coordinator& coord, Events* events)
      : local_(local),
        has_peers_(static_cast<std::size_t>(world_size) > local.size()),
        opts_(opts),
        attempt_(attempt),
        coord_(coord),
        reporter_(report_settings(opts, attempt, events), coord),
        relay_(io_, relay_settings(opts, attempt, world_size, events)),
        teardown_(io_, procs_, opts.term_timeout),
        grace_(io_, opts.term_timeout),
        failures_(
            io_, coord, relay_, publish_bound(opts.term_timeout), opts.signal_settle,
            [this](const Failure& f) { on_local_failure(f); }, [this] { check_done(); }),
        hang_(io_, procs_, hang_settings(opts, attempt),
              [this](const std::vector<HungRank>& h) { on_hang(h); }),
        sig_sd_(io_),
        world_size_(world_size),
        status_(io_, coord, std::chrono::milliseconds(core::status_interval_ms(attempt.agents))) {
    failures_.set_step_source([this] { return hang_.best_step(); });
  }

  RunResult run();

 private:
  // Lifecycle hooks.
  void on_spawned(Proc& p, const std::vector<std::string>& argv);
  void on_line(Proc& p, bool is_err, std::string_view line) override;
  void on_read(Proc& p, bool is_err, std::string_view open_line) override;
  void on_eof(Proc& p, bool is_err) override;
  void on_exit(Proc& p) override;
  void on_signal(int sig);
  void take_pending_signals();
  void claim_late_exits(int sig);
  void on_remote_abort(const Failure& f, bool from_store);
  void on_local_failure(const Failure& f);
  void on_hang(const std::vector<HungRank>& hung);
  void collect_stacks(const std::vector<HungRank>& hung, const char* reason, const Failure& root);
  void on_all_exited();

  std::optional<StartFailure> spawn_all();
  RunResult start_failure(const StartFailure& s);
  void start_teardown(int sig, const char* reason, const Failure& root);
  void arm_signal();
  void check_done();
  void deliver_posted();
  bool succeeded() const;
  void wait_exit_barrier(SignalWatcher& sigw);
  RunResult base_result() const;
  std::vector<WorkerExit> exits() const;
  RunResult finish();
  core::NodeStatus status_snapshot() const;

  const std::vector<core::Worker>& local_;
  bool has_peers_;  // other nodes (or tasks) run workers of this job
  const AgentOptions& opts_;
  const AttemptContext& attempt_;
  Coordinator& coord_;
  asio::io_context io_;  // declared before everything that uses it
  Reporter reporter_;
  OutputRelay relay_;
  std::unique_ptr<ErrorFiles> error_files_;  // the workers' TORCHELASTIC_ERROR_FILEs; outlives them
  std::vector<std::unique_ptr<Proc>> procs_;
  Reaper reaper_;  // declared after procs_: says goodbye before their zombies are reaped
  Teardown teardown_;
  CheckpointGrace grace_;
  FailureTracker failures_;
  HangGuard hang_;
  PythonStackHook stack_hook_;             // `ddprun stacks`: its directory outlives the workers' run
  std::vector<std::string> stacks_files_;  // each worker's stacks file (worker index order)
  std::string workers_path_;               // the workers' PATH (eu-stack)
  asio::posix::stream_descriptor sig_sd_;
  unsigned char sig_buf_[64] = {};
  std::string host_;
  int node_rank_ = 0;
  bool running_ = false;  // the loop runs; after it, signals wait for finish() and nothing is torn down
  std::vector<int> late_signals_;
  int agent_signal_ = 0;     // the first stopping signal the agent got
  bool on_request_ = false;  // a failure came within the grace after a checkpoint signal
  int world_size_;
  std::vector<std::size_t> hung_workers_;  // the ranks of a hang declared here (by worker index)
  StatusPublisher status_;                 // last: stopped before anything its snapshots read goes
};

}  // namespace ddprun::agent::detail
