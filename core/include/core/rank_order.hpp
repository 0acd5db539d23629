#pragma once
// --rank-order slurm|topology (docs/slurm.md, "Topology-aware node ranks"): node ranks that follow the
// cluster's switches or blocks, from each node's SLURM_TOPOLOGY_ADDR, and the standby that replaces a
// lost node. Pure; table-tested in tests/unit/core/test_rank_order.cpp.
#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/enum_names.hpp"

namespace ddprun::core {

enum class RankOrder { slurm, topology };
inline constexpr std::array<EnumName<RankOrder>, 2> kRankOrderNames{
    {{RankOrder::slurm, "slurm"}, {RankOrder::topology, "topology"}}};
std::optional<RankOrder> parse_rank_order(std::string_view v);
const char* to_string(RankOrder o);

// Longest SLURM_TOPOLOGY_ADDR taken as it is; a longer one is malformed (the join record stays O(1)).
inline constexpr std::size_t kMaxTopologyAddr = 256;

// A node's switch or block: SLURM_TOPOLOGY_ADDR without its last component ("s0.s3.node7" -> "s0.s3",
// "b3.node17" -> "b3"). No path: `why` says what was wrong (unset, no switch or block in it, malformed).
struct TopologyGroup {
  std::optional<std::string> path;
  std::string why;  // when !path
};
TopologyGroup topology_group(std::string_view addr);

// One node as the rendezvous knows it, in Slurm's order (node rank = SLURM_NODEID).
struct OrderInput {
  std::string addr;    // its SLURM_TOPOLOGY_ADDR ("" when unset)
  bool store = false;  // it serves the rendezvous store (node 0's agent): it stays node rank 0
};
struct OrderedNode {
  std::size_t index = 0;  // into the input
  TopologyGroup group;
};
// The node ranks by topology: the store node first, then the rest of its group, then the other groups
// in the order their first node comes in Slurm's order; within a group Slurm's order; nodes without a
// group last, in Slurm's order (the store node stays first even without one). Deterministic.
std::vector<OrderedNode> topology_order(const std::vector<OrderInput>& nodes);

// "node rank 4" or "node ranks 4-7": the node ranks first to last, both included.
std::string node_rank_range(std::size_t first, std::size_t last);

// The order as one line per run of node ranks in one group, for node 0's start-up message:
// "node ranks 0-1: switch/block s0.s1 (n[1,3])". `hosts` by input index.
std::vector<std::string> describe_order(const std::vector<OrderedNode>& order,
                                        const std::vector<std::string>& hosts);

// Who runs workers in a round after a restart (elastic, docs/elastic.md): every candidate that ran
// workers in the last round still does; the free places (up to `max_active` in all) go to standbys,
// first, for each lost node in turn, a free one in that node's switch or block (`lost_groups`; "" for a
// lost node without one), then the rest in Slurm's order. Candidates in Slurm's order.
struct StandbyCandidate {
  std::string group;  // its switch or block path, "" when none
  bool was_active = false;
};
std::vector<bool> choose_actives(const std::vector<StandbyCandidate>& candidates,
                                 const std::vector<std::string>& lost_groups, int max_active);

}  // namespace ddprun::core
