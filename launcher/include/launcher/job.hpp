#pragma once
// One node's whole job: the attempts loop. Each attempt joins the other agents (or, standalone,
// plans alone), runs this node's workers under the agent's supervisor, then restarts or exits.
#include <string>

#include "agent/options.hpp"
#include "core/config.hpp"

namespace ddprun::launcher {

// Returns the process exit code: 0 when every worker everywhere exited 0, else the root cause's code.
// `ao` comes from agent_options (launcher/agent_options.hpp), already checked. `r` is taken: in agent
// mode its assumed layout (one entry per node) is dropped once the rendezvous session has started.
int run_job(const core::Options& o, core::Resolved r, const agent::AgentOptions& ao);

}  // namespace ddprun::launcher
