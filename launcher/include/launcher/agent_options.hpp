#pragma once
// The agent's options for this node, from the command line and the resolution: built in one place
// for the run and for --dry-run, so that a dry run rejects exactly what a run rejects.
#include "agent/options.hpp"
#include "core/config.hpp"

namespace ddprun::launcher {

// COMMAND as the user gave it (the agent builds the argv with the core's one builder), the log and
// teardown options, and the rank filter. Checked with agent::validate_options: throws agent::Error
// (or core::Error for the command) with a one-line message.
agent::AgentOptions agent_options(const core::Options& o, const core::Resolved& r);

}  // namespace ddprun::launcher
