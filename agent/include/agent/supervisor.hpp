#pragma once
// Entry point: run this node's workers once and supervise them until they all ended.
#include <vector>

#include "agent/attempt_context.hpp"
#include "agent/coordinator.hpp"
#include "agent/options.hpp"
#include "agent/result.hpp"
#include "core/plan.hpp"

namespace ddprun::agent {

class Events;

// Spawns `local` (this node's workers), relays their output, supervises them, tears down on the
// first failure, a remote abort or a stopping signal, and returns how it ended. Prints the failure
// report and the summary table on stderr (quiet: only the brief report of a failure), or emits them
// as events in json mode. `events`: where ddprun's own messages go as JSON events (--log-format json);
// null or text mode: the usual text on stderr. In json mode the supervisor writes no text of its own,
// whatever `quiet` says.
// Can be called again for a restart; it must be called from a thread that lives as long as the
// workers (their death signal follows it).
// Throws Error only for invalid options, and passes on what the coordinator throws when the run
// starts (installing the abort handler); a command that cannot start gives spawn_failed.
RunResult run_workers(const std::vector<core::Worker>& local, int world_size, const AgentOptions& opts,
                      const AttemptContext& attempt, Coordinator& coordinator, Events* events);

// When the launch ends: the job's own exit code (`job_exit_code`) added to the error file this node's
// last run wrote, if any, which holds that run's code (3, say, where the job exits 123 after restarts
// without progress). `last` the last run's attempt, `node_rank` this node's in it.
void record_job_exit(const AgentOptions& opts, const AttemptContext& last, int node_rank, int job_exit_code);

}  // namespace ddprun::agent
