#pragma once
// A start-up error told to the other agents, so that a job with one bad node ends at once everywhere.
#include <string>

#include "core/config.hpp"

namespace ddprun::launcher {

// Start-up errors (docs/rendezvous.md): this agent cannot start, for `what` (exit code `code`), found
// before it could join (`r` from core::resolve_job). In agent mode with other agents it still reaches
// the store (serving it on node rank 0) and publishes the error, so that every agent ends with it at
// once instead of waiting --rdzv-timeout for this node; returns once they all have it, or at once when
// it cannot tell them (a dry run, one agent, the store out of reach or no credential for it).
void publish_start_error(const core::Options& o, const core::Resolved& r, const std::string& what, int code);

}  // namespace ddprun::launcher
