#pragma once
// The store server's limits follow the machine: the connection cap comes from RLIMIT_NOFILE, whose
// soft limit is raised to the hard one at start (docs/rendezvous.md, "Server limits").
#include <cstddef>
#include <cstdint>
#include <string>

namespace ddprun::store {

struct FdLimits {
  std::uint64_t soft = 0;
  std::uint64_t hard = 0;
};

// Descriptors node 0's agent keeps for itself (its workers' pipes, logs, the listener): the
// store takes the rest. Grows with the limit, so a big limit leaves room for a big node.
inline constexpr std::uint64_t kReservedFds = 256;

// The soft limit to ask for: the hard one, capped where "unlimited" would be absurd.
std::uint64_t wanted_soft_limit(const FdLimits& l);

// Connections the store accepts under a soft limit of `soft` descriptors (at least 1).
std::size_t connection_cap(std::uint64_t soft);

// The one-line error when the cap is reached: names the cap, the limits and the fix.
std::string connection_limit_message(std::size_t cap, const FdLimits& l);

// Raises this process's soft RLIMIT_NOFILE to wanted_soft_limit() (best effort) and returns the
// limits in force afterwards.
FdLimits raise_fd_limit();

}  // namespace ddprun::store
