#include "launcher/agent_options.hpp"

#include <chrono>

#include "agent/io.hpp"
#include "agent/policy.hpp"

namespace ddprun::launcher {

agent::AgentOptions agent_options(const core::Options& o, const core::Resolved& r) {
  agent::AgentOptions a;
  // The agent checks the interpreter and the script before any worker starts.
  a.command = o.command;
  a.no_python = o.no_python;
  a.module = o.module;
  a.python = o.python;
  a.local_rank_arg = r.command_spec.local_rank_arg;
  a.term_timeout =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(o.term_timeout));
  if (o.hang_timeout) {
    a.hang_timeout =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(*o.hang_timeout));
  }
  a.max_restarts_without_progress = o.max_restarts_without_progress.value_or(0);
  a.prefix_template = o.prefix;
  a.no_prefix = o.no_prefix;
  a.tee = o.tee;
  // Absolute: the workers' error and heartbeat files are in it, and a worker may change directory.
  if (o.log_dir) a.log_dir = agent::absolute_path(*o.log_dir);
  a.local_ranks_filter = r.local_ranks_filter;
  a.error_file = o.error_file;
  a.requeue = r.job.requeue_count;
  if (r.mode == core::Mode::per_task) a.task_rank = r.job.task_rank;
  // srun's signals reach the workers before their agent: a failure waits for one still on its way.
  if (r.context == core::SlurmContext::step) a.signal_settle = agent::kSlurmSignalSettle;
  a.quiet = o.quiet;
  a.verbose = o.verbose;
  agent::validate_options(a);
  return a;
}

}  // namespace ddprun::launcher
