#pragma once
// One node's whole job: rendezvous, spawn and supervise, restarts, exit code. Owned by the lead;
// glue between launcher (plan), rendezvous (store) and the local supervisor.
#include "launcher/config.hpp"

namespace ddprun::agent {

// Returns the process exit code: 0 when every worker everywhere exited 0, else the root cause's code.
int run_job(const launcher::Options& o, const launcher::Resolved& r);

}  // namespace ddprun::agent
