#include "core/node_count.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/config.hpp"
#include "core/error.hpp"

namespace ddprun::core {

bool is_elastic(int nnodes_min, int nnodes_max, int nagents, int max_restarts) {
  return max_restarts > 0 && (nnodes_min < nnodes_max || nagents > nnodes_max);
}

namespace {

// Fail-fast: no node can leave or wait, so MIN = MAX = the nodes that run.
NodeCounts fixed(int n) {
  return {n, n, n, n, false};
}

}  // namespace

NodeCounts step_counts(const std::optional<std::string>& nnodes, int n, int max_restarts,
                       const std::string& what) {
  if (!nnodes) return fixed(n);
  const auto [lo, hi] = parse_nnodes(*nnodes);
  const bool standbys = n > hi && max_restarts > 0;
  if (n < lo || (n > hi && !standbys)) {
    const std::string extra = n - hi == 1 ? std::string("the extra node as a standby")
                                          : fmt::format("the {} extra nodes as standbys", n - hi);
    const std::string keep = n > hi ? ", or add --max-restarts K to keep " + extra : "";
    throw Error(
        fmt::format("--nnodes {} disagrees with {} ({} nodes); drop --nnodes or change the allocation{}",
                    *nnodes, what, n, keep));
  }
  if (!is_elastic(lo, hi, n, max_restarts)) return fixed(n);
  return {lo, hi, std::min(n, hi), n, true};
}

NodeCounts batch_counts(const std::optional<std::string>& nnodes, int n, int max_restarts,
                        const std::string& what) {
  if (!nnodes) return fixed(n);
  const auto [lo, hi] = parse_nnodes(*nnodes);
  if (lo > n) {
    throw Error(
        fmt::format("--nnodes {} asks for more nodes than the allocation's {} ({})", *nnodes, n, what));
  }
  if (!is_elastic(lo, hi, n, max_restarts)) return fixed(std::min(hi, n));
  return {lo, hi, std::min(hi, n), n, true};
}

NodeCounts outside_counts(const std::optional<std::string>& nnodes, std::optional<int> node_rank,
                          int max_restarts) {
  const auto [lo, hi] = nnodes ? parse_nnodes(*nnodes) : std::pair<int, int>{1, 1};
  int agents = hi;
  if (node_rank && *node_rank >= hi && max_restarts > 0) agents = *node_rank + 1;
  return {lo, hi, hi, agents, is_elastic(lo, hi, agents, max_restarts)};
}

}  // namespace ddprun::core
