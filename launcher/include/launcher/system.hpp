#pragma once
// Thin I/O: the facts resolution needs from this process and machine.
#include <cstdint>
#include <string>

#include "core/config.hpp"
#include "core/slurm_env.hpp"

namespace ddprun::launcher {

core::EnvSnapshot snapshot_environ();
core::SystemInfo probe_system();

// Whether a TCP port can be bound on 0.0.0.0 right now (with SO_REUSEADDR, as PyTorch's store does).
bool port_is_free(std::uint16_t port);
// The planned port if it is free and not `avoid`, else a free ephemeral port (never `avoid`). A port the
// user gave (`given`, from --master-port or DDPRUN_MASTER_PORT) is never replaced: busy, it is an error.
std::uint16_t choose_master_port(int planned, std::uint16_t avoid, bool given = false);

}  // namespace ddprun::launcher
