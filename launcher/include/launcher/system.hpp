#pragma once
// Thin I/O: the facts resolution needs from this process and machine.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/config.hpp"
#include "core/iface.hpp"
#include "core/slurm_env.hpp"

namespace ddprun::launcher {

core::EnvSnapshot snapshot_environ();
core::SystemInfo probe_system();

// This machine's interfaces and their IPv4/IPv6 addresses (getifaddrs), for core::choose_iface_address.
std::vector<core::IfaceEntry> list_interfaces();
// --rdzv-iface on a node that runs an agent: this node advertises that interface's address
// (core::set_local_addr); throws core::Error when it has none. A batch script's shell leaves it to the
// nodes.
void apply_rdzv_iface(core::Resolved& r);

// Whether a TCP port can be bound on 0.0.0.0 right now (with SO_REUSEADDR, as PyTorch's store does).
bool port_is_free(std::uint16_t port);

// A claim on a MASTER_PORT that every other ddprun on this machine respects, held from the choice
// until this agent exits: a bind check alone leaves a window until worker rank 0 binds the port, in
// which a second job started at the same moment finds it free too. The claim is an abstract Unix
// socket named after the port: no file to leave behind, freed by the kernel when this process dies
// however it dies, the same for every user, and per network namespace, exactly like the port.
class PortHold {
 public:
  PortHold() = default;
  // The claim, or nothing when another live ddprun holds the port. A system where the socket cannot
  // be made at all gets an empty claim (port() 0): the bind check alone, as before, rather than no job.
  static std::optional<PortHold> take(std::uint16_t port);
  PortHold(PortHold&& o) noexcept;
  PortHold& operator=(PortHold&& o) noexcept;
  PortHold(const PortHold&) = delete;
  PortHold& operator=(const PortHold&) = delete;
  ~PortHold();
  std::uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  std::uint16_t port_ = 0;
};

struct MasterPort {
  std::uint16_t port = 0;
  PortHold hold;  // keep it for the job's life
};

// Linux's ephemeral port range (ip_local_port_range), {32768, 60999} when it cannot be read.
std::pair<int, int> ephemeral_port_range();

// Where a busy MASTER_PORT that the user did not give is looked for first, in order: the ports above
// `planned` (above the default when `planned` is unset or not below `ephemeral_low`) up to the ephemeral
// range, at most 256, without `avoid`. Below that range the kernel hands no port to an outgoing connection,
// and the replacement is predictable (29501, 29502, ...). Pure.
std::vector<std::uint16_t> master_port_fallbacks(int planned, std::uint16_t avoid, int ephemeral_low);

// The planned port if it is free, not `avoid` and no other ddprun here holds it, else the next free one
// above it below the ephemeral range (29501, 29502, ... for the default), else a free ephemeral port (never
// `avoid`), claimed for this job. A port the user gave (`given`, from --master-port or
// DDPRUN_MASTER_PORT) is never replaced: busy or held by another ddprun job, it is an error. `held`:
// this job's claim from its previous attempt, kept when the planned port is still that one.
MasterPort choose_master_port(int planned, std::uint16_t avoid, bool given = false, PortHold held = {});

}  // namespace ddprun::launcher
