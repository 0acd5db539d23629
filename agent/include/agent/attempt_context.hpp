#pragma once
// What one attempt of the launch tells its run of the workers, besides the options (options.hpp): the
// attempts loop (launcher/job.cpp) builds one for each attempt.
#include <functional>

#include "agent/result.hpp"

namespace ddprun::agent {

struct AttemptContext {
  int attempt = 0;  // restarts of this launch (--max-restarts); never negative
  // The steps of this launch's attempts before this one: with max_restarts_without_progress, the report
  // of a run that ends the job for want of progress says the job's code (RunResult::no_progress).
  StepHistory steps;
  int elastic_events = 0;  // membership changes of an elastic job so far (`ddprun top`'s header)
  int plan_nodes = 0;      // active nodes of this attempt's plan (`ddprun top`); 0: `agents`
  // ddprun agents in this attempt's plan (nodes; tasks in per-task mode): who reports how, the error
  // file's name, the status pace.
  int agents = 1;
  // Called once every local worker started, before any of their output is relayed (the startup
  // table): a command that cannot start is then one error line with nothing before it.
  std::function<void()> on_started;
};

}  // namespace ddprun::agent
