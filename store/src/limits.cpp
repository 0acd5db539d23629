// RLIMIT_NOFILE: raising the soft limit, and the connection cap that follows from it.
#include "store/limits.hpp"

#include <sys/resource.h>

#include <algorithm>

#include <fmt/core.h>

namespace ddprun::store {
namespace {
// Linux refuses a soft limit above fs.nr_open (1 Mi by default) even when the hard one is
// "unlimited".
constexpr std::uint64_t kMaxSensible = 1u << 20;
}  // namespace

std::uint64_t wanted_soft_limit(const FdLimits& l) {
  const std::uint64_t hard = l.hard == RLIM_INFINITY ? kMaxSensible : l.hard;
  return std::max(l.soft, hard);
}

std::size_t connection_cap(std::uint64_t soft) {
  const std::uint64_t reserve = kReservedFds + soft / 16;
  return static_cast<std::size_t>(soft > reserve ? soft - reserve : 1);
}

std::string connection_limit_message(std::size_t cap, const FdLimits& l) {
  return fmt::format(
      "the rendezvous store reached its connection limit of {} (open-file limit RLIMIT_NOFILE {}, hard "
      "limit {}); raise the open-file limit on node 0 (ulimit -n, or the hard limit in "
      "limits.conf or Slurm's PropagateResourceLimits): each node needs one descriptor",
      cap, l.soft, l.hard == RLIM_INFINITY ? std::string("unlimited") : std::to_string(l.hard));
}

FdLimits raise_fd_limit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return {1024, 1024};
  const FdLimits before{r.rlim_cur, r.rlim_max};
  const std::uint64_t want = wanted_soft_limit(before);
  if (want > before.soft) {
    rlimit raised{static_cast<rlim_t>(want), r.rlim_max};
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) return {want, before.hard};
  }
  return before;
}

}  // namespace ddprun::store
