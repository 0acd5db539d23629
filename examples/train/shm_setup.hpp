// Chooses the shared-memory gradient path for a data-parallel group whose ranks share a node.
#pragma once

#include "dist.hpp"
#include "options.hpp"
#include "reducer.hpp"

namespace ddprun::train {

// Sets up the shared-memory gradient path when every rank of the DP group can map one segment
// (same node, same IPC namespace). All ranks agree through the store: each reports whether it
// attached, and the shm path is used only if all did; otherwise gloo carries the gradients.
// Throws only for --allreduce shm.
void setup_shm_allreduce(Dist& d, GradReducer& reducer, const Options& o);

}  // namespace ddprun::train
