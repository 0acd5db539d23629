#pragma once
// Per-task mode's session (srun --ntasks-per-node=K ddprun): each ddprun is one worker, and only
// local task 0 of each node talks to node 0 (node_relay.hpp). Private to the launcher.
#include <memory>

#include "session.hpp"

namespace ddprun::launcher {

std::unique_ptr<Session> make_per_task_session(const core::Options& o, const core::Resolved& r,
                                               store::auth::Config auth, agent::Events& ev);

}  // namespace ddprun::launcher
