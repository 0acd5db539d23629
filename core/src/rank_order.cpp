#include "core/rank_order.hpp"

#include <algorithm>
#include <map>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"
#include "core/hostlist.hpp"

namespace ddprun::core {

std::optional<RankOrder> parse_rank_order(std::string_view v) {
  return value_of(kRankOrderNames, v);
}

const char* to_string(RankOrder o) {
  return name_of(kRankOrderNames, o, "slurm");
}

TopologyGroup topology_group(std::string_view addr) {
  if (addr.empty()) return {std::nullopt, "no SLURM_TOPOLOGY_ADDR"};
  if (addr.size() > kMaxTopologyAddr)
    return {std::nullopt, fmt::format("SLURM_TOPOLOGY_ADDR longer than {} bytes", kMaxTopologyAddr)};
  const auto bad = std::find_if(addr.begin(), addr.end(), [](char c) {
    return static_cast<unsigned char>(c) <= ' ' || static_cast<unsigned char>(c) >= 0x7f;
  });
  if (bad != addr.end()) return {std::nullopt, "SLURM_TOPOLOGY_ADDR holds spaces or control characters"};
  const auto last = addr.rfind('.');
  // Without a topology plugin Slurm sets the node's own name: nothing to group by. Not named here, so
  // that every such node shares one line of the description.
  if (last == std::string_view::npos)
    return {std::nullopt, "SLURM_TOPOLOGY_ADDR names no switch or block (no topology plugin?)"};
  const std::string_view path = addr.substr(0, last);
  if (path.empty() || last + 1 == addr.size() || path.front() == '.' || path.back() == '.' ||
      path.find("..") != std::string_view::npos)
    return {std::nullopt, fmt::format("SLURM_TOPOLOGY_ADDR '{}' has an empty component", addr)};
  return {std::string(path), {}};
}

std::vector<OrderedNode> topology_order(const std::vector<OrderInput>& nodes) {
  std::vector<OrderedNode> out;
  out.reserve(nodes.size());
  std::vector<TopologyGroup> groups;
  groups.reserve(nodes.size());
  for (const auto& n : nodes) groups.push_back(topology_group(n.addr));
  // Each group's rank among the groups: the store's first, then by its first node in Slurm's order.
  std::map<std::string, std::size_t> rank_of;
  const auto store = std::find_if(nodes.begin(), nodes.end(), [](const OrderInput& n) { return n.store; });
  const auto store_index = static_cast<std::size_t>(store - nodes.begin());
  if (store != nodes.end() && groups[store_index].path) rank_of.emplace(*groups[store_index].path, 0);
  for (const auto& g : groups) {
    if (g.path) rank_of.emplace(*g.path, rank_of.size());
  }
  const std::size_t ungrouped = rank_of.size();
  std::vector<std::size_t> index(nodes.size());
  for (std::size_t i = 0; i < index.size(); ++i) index[i] = i;
  const auto key = [&](std::size_t i) {
    const std::size_t group = groups[i].path ? rank_of.at(*groups[i].path) : ungrouped;
    return std::make_tuple(i == store_index ? 0 : 1, group, i);
  };
  std::sort(index.begin(), index.end(), [&](std::size_t a, std::size_t b) { return key(a) < key(b); });
  for (std::size_t i : index) out.push_back({i, std::move(groups[i])});
  return out;
}

std::string node_rank_range(std::size_t first, std::size_t last) {
  return first == last ? fmt::format("node rank {}", first) : fmt::format("node ranks {}-{}", first, last);
}

std::vector<std::string> describe_order(const std::vector<OrderedNode>& order,
                                        const std::vector<std::string>& hosts) {
  std::vector<std::string> lines;
  for (std::size_t first = 0; first < order.size();) {
    std::size_t end = first + 1;
    while (end < order.size() && order[end].group.path == order[first].group.path &&
           order[end].group.why == order[first].group.why)
      ++end;
    std::vector<std::string> names;
    for (std::size_t i = first; i < end; ++i) names.push_back(hosts.at(order[i].index));
    std::string list;
    try {
      list = compress_hostlist(names);
    } catch (const Error&) {
      list = fmt::format("{}", fmt::join(names, ","));
    }
    const std::string ranks = node_rank_range(first, end - 1);
    const auto& g = order[first].group;
    lines.push_back(g.path ? fmt::format("{}: switch/block {} ({})", ranks, *g.path, list)
                           : fmt::format("{}: {}, kept in node-rank order ({})", ranks, g.why, list));
    first = end;
  }
  return lines;
}

std::vector<bool> choose_actives(const std::vector<StandbyCandidate>& candidates,
                                 const std::vector<std::string>& lost_groups, int max_active) {
  std::vector<bool> active(candidates.size(), false);
  int count = 0;
  for (std::size_t i = 0; i < candidates.size() && count < max_active; ++i) {
    if (candidates[i].was_active) {
      active[i] = true;
      ++count;
    }
  }
  const auto take = [&](const auto& fits) {
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      if (!active[i] && fits(candidates[i])) {
        active[i] = true;
        ++count;
        return;
      }
    }
  };
  for (const auto& g : lost_groups) {
    if (count >= max_active) break;
    if (!g.empty()) take([&](const StandbyCandidate& c) { return c.group == g; });
  }
  while (count < max_active && count < static_cast<int>(candidates.size()))
    take([](const StandbyCandidate&) { return true; });
  return active;
}

}  // namespace ddprun::core
