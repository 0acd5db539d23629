#pragma once
// Slurm hostlist expressions (grammar of Slurm 23.02.5+) and tasks-per-node count lists.
// Pure functions; errors are core::Error naming the expression and the 0-based position.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"

namespace ddprun::core {

// Largest number of hosts one bracket range may produce (as Slurm).
inline constexpr std::size_t kMaxRangeHosts = 65536;

// Caps on a whole expansion, so a short hostile expression ("a[0-65535]b[0-65535]") is an error
// instead of exhausting memory. Far above any real allocation.
inline constexpr std::size_t kMaxTotalHosts = std::size_t{1} << 20;
inline constexpr std::size_t kMaxTotalChars = std::size_t{1} << 26;  // bytes of host names

// "node[01-03],gpu-a[1-2]-ib rack[1-2]-n[1,3]" -> hosts in Slurm's order; duplicates and order kept.
std::vector<std::string> expand_hostlist(std::string_view expr);

// The reverse, for display: consecutive hosts that differ only in a trailing number of the same
// width are folded into one bracket ("n01,n02,n03,m" -> "n[01-03],m"). Never sorts, never dedups;
// writes what libslurm writes, and expand_hostlist(compress_hostlist(x)) == x. Throws Error for a name
// no hostlist can hold (empty, or with brackets, commas, whitespace or control characters).
std::string compress_hostlist(const std::vector<std::string>& hosts);

// "2(x3),1" -> {2,2,2,1}. Used for SLURM_TASKS_PER_NODE and SLURM_JOB_CPUS_PER_NODE.
std::vector<int> parse_count_list(std::string_view s);

}  // namespace ddprun::core
