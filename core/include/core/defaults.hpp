#pragma once
// Defaults the CLI's help, the resolved options and the layers' option structs share, one place
// each (docs/cli.md and docs/ddprun.1 state the same numbers).
#include <chrono>

namespace ddprun::core {

// --rdzv-timeout: how long the agents wait for every node to join.
inline constexpr std::chrono::seconds kDefaultRdzvTimeout{900};

// --rdzv-last-call: with --nnodes MIN:MAX, how long node 0 waits for more nodes once MIN joined.
inline constexpr std::chrono::seconds kDefaultLastCall{30};

// --term-timeout: the grace between SIGTERM and SIGKILL. Well inside Slurm's default KillWait
// (30 s): a time limit or scancel TERMs the agent, which forwards it, waits this long, kills, and
// still has time to report before slurmstepd's own SIGKILL.
inline constexpr std::chrono::seconds kDefaultTermTimeout{10};

}  // namespace ddprun::core
