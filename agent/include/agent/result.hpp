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
  bool remote_abort = false;          // teardown was started by another node's failure
  std::vector<HungWorker> hung;       // hang: this node's silent ranks and their stacks
  int attempt = 0;
  int node_rank = 0;
  std::string host;
};

// What the attempts loop does after an attempt: start another, or exit with `exit_code`.
struct AttemptDecision {
  bool restart = false;
  int exit_code = 0;
};

// The one restart rule, for every mode. `published` is the job's root cause as every node sees it
// (the first failure published to the store; nullopt on a single node). A failed attempt restarts
// while restarts are left, unless the agent was stopped by a signal or the root cause ends the job
// (core::ends_job). Every node then exits with the published root cause's code.
AttemptDecision after_attempt(const RunResult& r, const std::optional<Failure>& published, int attempt,
                              int max_restarts);

// A stopping signal that came after the run (held: see hold_stop_signals) never changes the decided
// exit code; it only cancels a restart, since the agent was asked to stop.
AttemptDecision after_held_signal(AttemptDecision d, int held_signal);

}  // namespace ddprun::agent
