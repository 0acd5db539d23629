#include "run_settings.hpp"

#include "agent/events.hpp"
#include "log_relay.hpp"

namespace ddprun::agent {

RelaySettings relay_settings(const AgentOptions& opts, const AttemptContext& attempt, int world_size,
                             const Events* events) {
  RelaySettings s;
  s.prefix_on = !opts.no_prefix && (opts.prefix_template.has_value() || world_size > 1);
  s.prefix_template = opts.prefix_template.value_or(std::string(kDefaultPrefixTemplate));
  s.redraw_interval = opts.redraw_interval;
  s.local_ranks_filter = opts.local_ranks_filter;
  s.log_dir = opts.log_dir;
  s.requeue = opts.requeue;
  s.attempt = attempt.attempt;
  s.json_events = events != nullptr && events->json();
  return s;
}

ReportSettings report_settings(const AgentOptions& opts, const AttemptContext& attempt, Events* events) {
  ReportSettings s;
  s.command = opts.command;
  s.module = opts.module;
  s.term_timeout = opts.term_timeout;
  s.error_file = opts.error_file;
  s.log_dir = opts.log_dir;
  s.requeue = opts.requeue;
  s.attempt = attempt.attempt;
  s.agents = attempt.agents;
  s.task_rank = opts.task_rank;
  s.quiet = opts.quiet;
  s.verbose = opts.verbose;
  s.events = events;
  return s;
}

HangSettings hang_settings(const AgentOptions& opts, const AttemptContext& attempt) {
  return {opts.hang_timeout, opts.max_restarts_without_progress > 0, opts.log_dir, opts.requeue,
          attempt.attempt};
}

ErrorFileSpec error_file_spec(const ReportSettings& s, int node_rank) {
  return {s.error_file, s.log_dir, s.requeue, s.attempt, node_rank, s.agents, s.task_rank};
}

}  // namespace ddprun::agent
