#pragma once
// What one run of this node's workers ended with.
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "agent/coordinator.hpp"
#include "agent/heartbeat_step.hpp"
#include "agent/policy.hpp"

namespace ddprun::agent {

struct WorkerExit {
  int rank = 0;
  int local_rank = 0;
  int node_rank = 0;
  std::string host;
  long pid = 0;
  ExitStatus status;
  bool stopped_by_ddprun =
      false;           // it ended after teardown had started (our TERM/KILL or a forwarded signal)
  std::string reason;  // one line
  core::FailureTime end_time{};
  std::chrono::milliseconds duration{0};
  std::vector<std::string> stderr_tail;
};

// A local rank found hung (or silent when another node's hang stopped the job), with its stack.
struct HungWorker {
  int rank = 0;
  int local_rank = 0;
  long pid = 0;
  std::chrono::milliseconds silent{0};
  bool python = false;  // the stack is faulthandler's dump of every thread, else eu-stack's
  std::string stack;    // capped (cap_stack)
};

struct RunResult {
  int exit_code = 0;
  bool success = false;               // every local worker exited 0, no abort, no signal
  std::optional<Failure> root_cause;  // the job's root cause (maybe from another node)
  std::vector<WorkerExit> exits;      // local workers in local-rank order (empty if none started)
  bool stopped_by_signal = false;     // TERM/INT/HUP/QUIT reached the agent: no restart (after_stop)
  int signal = 0;                     // that signal
  bool spawn_failed = false;          // the command could not be started: restarting cannot help
  bool remote_abort = false;          // the root cause is another node's failure
  std::string not_told;          // non-empty: the other nodes could not be told of this node's failure, why
  std::vector<HungWorker> hung;  // hang: this node's silent ranks and their stacks
  // Node 0 after a hang on another node: the root cause's rank's stack, from that node's record.
  std::optional<HungWorker> root_stack;
  int attempt = 0;
  int node_rank = 0;
  std::string host;
  // This failed run ends the job for want of progress (--max-restarts-without-progress, after_attempt):
  // the job exits kNoProgressExitCode, not exit_code, which stays the run's own.
  bool no_progress = false;
};

// What the attempts loop does after an attempt: start another, or exit with `exit_code`.
struct AttemptDecision {
  bool restart = false;
  int exit_code = 0;
  bool no_progress = false;  // ended by --max-restarts-without-progress (exit_code kNoProgressExitCode)
};

// The exit code of a job stopped by --max-restarts-without-progress, on every node: below the hang's
// 124 and the health check's 125, so a batch script can tell it from a crash and not requeue it.
inline constexpr int kNoProgressExitCode = 123;

// The code the job exits with when this run is its last, as the text reports say it.
inline int job_code(const RunResult& r) {
  return r.no_progress ? kNoProgressExitCode : r.exit_code;
}

// The steps the attempts reached, as every node knows them: each attempt's step is its root cause's
// (Failure::step), the same record on every node.
struct StepHistory {
  std::optional<Step> best;  // the highest step of any attempt so far
  std::optional<Step> last;  // the last attempt's
  int stalled = 0;           // restarts in a row that made no progress
};

// `h` with attempt `attempt` recorded. A restart (attempt > 0) made progress when its step is higher
// than every earlier attempt's; one without a step made none. The first attempt is no restart.
StepHistory record_step(StepHistory h, std::optional<Step> step, int attempt);

// `h` with the attempt that ended with `root` recorded, as record_step with its step; except an attempt
// ended by a lost node (Failure::lost), which carries no step because no worker failed: it neither counts
// as a restart without progress nor resets the count (only attempts that ran and failed count).
StepHistory record_attempt(StepHistory h, const std::optional<Failure>& root, int attempt);

// --max-restarts-without-progress: `limit` restarts in a row without progress (0: off), and the
// history with this attempt recorded.
struct ProgressRule {
  int limit = 0;
  StepHistory history;
};

// The one restart rule, for every mode, standbys included. The run's root cause is the job's, as
// every node names it (choose_root_cause), and its exit code is that cause's. A failed attempt
// restarts while restarts are left, unless the root cause ends the job (core::ends_job: the agent's
// own stop among them). A failure that could be restarted, after `progress.limit` restarts in a row
// without progress, ends the job with kNoProgressExitCode instead, restarts left or not. A stop that
// came after another root cause is not weighed here but by after_stop.
AttemptDecision after_attempt(const RunResult& r, int attempt, int max_restarts,
                              const ProgressRule& progress = {});

// Whether this run, with its root cause's step recorded after `before` (the attempts so far), ends
// the job for want of progress: after_attempt's no_progress, known before the attempts loop asks, so
// that the run's report says the job's code (RunResult::no_progress).
bool ends_without_progress(const RunResult& r, int attempt, int limit, const StepHistory& before);

// The one line that says why the job stopped without progress.
std::string no_progress_line(const ProgressRule& progress);

// Whether the stopping signal this node's agent got (stopped_by_signal) is what ended the run, so the
// report and the job summary name it: the root cause is an agent's stop (this one's, or another node's:
// scancel signals every agent), or there is none. A signal that came
// once another cause was tearing the job down (srun --kill-on-bad-exit's TERM after a hang or a lost
// node, a cancel during a failed attempt's teardown) is not: the first cause is the one reported.
bool stop_is_cause(const RunResult& r);

// A standby's attempt (elastic) as a run: it ended with the job's root cause (nullopt: the active
// nodes finished), or with a stopping signal the agent got meanwhile (`held_signal`, 0 if none).
RunResult standby_result(const std::optional<Failure>& root, int held_signal);

// What a stopping signal makes of the attempt's decision (`stop`: the signal, 0 if none). It came
// during the run after another root cause (RunResult::signal, stopped_by_signal), or after the run
// (held: see hold_stop_signals), or during the health check before a restart. A restart that was
// due is cancelled, and the job exits 128 + signal as a job stopped while it runs: the user's cancel,
// a time limit or a preemption stops a job that would have gone on. An outcome already decided (a
// success, the last attempt's code, a cause that ends the job) keeps its code: srun
// --kill-on-bad-exit TERMs the other agents as soon as one exits with it.
AttemptDecision after_stop(AttemptDecision d, int stop);

}  // namespace ddprun::agent
