#pragma once
// What one run of this node's workers ended with.
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "agent/coordinator.hpp"
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
  bool stopped_by_signal = false;     // TERM/INT/HUP/QUIT reached the agent: do not restart
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
};

// What the attempts loop does after an attempt: start another, or exit with `exit_code`.
struct AttemptDecision {
  bool restart = false;
  int exit_code = 0;
};

// The one restart rule, for every mode, standbys included. The run's root cause is the job's, as
// every node names it (choose_root_cause), and its exit code is that cause's. A failed attempt
// restarts while restarts are left, unless the agent was stopped by a signal or the root cause
// ends the job (core::ends_job).
AttemptDecision after_attempt(const RunResult& r, int attempt, int max_restarts);

// A standby's attempt (elastic) as a run: it ended with the job's root cause (nullopt: the active
// nodes finished), or with a stopping signal the agent got meanwhile (`held_signal`, 0 if none).
RunResult standby_result(const std::optional<Failure>& root, int held_signal);

// A stopping signal that came after the run (held: see hold_stop_signals) never changes the decided
// exit code; it only cancels a restart, since the agent was asked to stop.
AttemptDecision after_held_signal(AttemptDecision d, int held_signal);

}  // namespace ddprun::agent
