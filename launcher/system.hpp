#pragma once
// Thin I/O: the facts resolution needs from this process and machine.
#include "launcher/config.hpp"
#include "launcher/slurm_env.hpp"

namespace ddprun::launcher {

EnvSnapshot snapshot_environ();
SystemInfo probe_system();

}  // namespace ddprun::launcher
