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

// Start-up errors (docs/rendezvous.md): this agent cannot start, for `what` (exit code `code`), found
// before it could join (`r` from core::resolve_job). In agent mode with other agents it still reaches
// the store (serving it on node rank 0) and publishes the error, so that every agent ends with it at
// once instead of waiting --rdzv-timeout for this node; returns once they all have it, or at once when
// it cannot tell them (a dry run, one agent, the store out of reach or no credential for it).
void publish_start_error(const core::Options& o, const core::Resolved& r, const std::string& what, int code);

}  // namespace ddprun::launcher
