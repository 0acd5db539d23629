#pragma once
// Self-launch: plain `ddprun ...` in a batch script or salloc shell re-runs itself on every node of
// the allocation as one srun step with one task per node.
#include <string>
#include <vector>

#include "core/config.hpp"

namespace ddprun::launcher {

// The srun command line that re-launches `self_argv` (ddprun's own argv, argv[0] resolved) on `nnodes`.
std::vector<std::string> self_launch_argv(const std::string& srun, int nnodes,
                                          const std::vector<std::string>& self_argv);

// Replaces this process with srun (so signals and the exit code pass straight through).
// Returns only on failure, with an Error.
[[noreturn]] void exec_self_launch(const core::Resolved& r, int argc, const char* const* argv);

}  // namespace ddprun::launcher
