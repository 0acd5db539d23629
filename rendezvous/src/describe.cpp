// The pure lines node 0 writes about a round's nodes: those that never joined, the hellos its store refused.
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "keys.hpp"
#include "rendezvous/rendezvous.hpp"

namespace ddprun::rdzv {

std::string describe_missing(const std::vector<int>& joined_ranks, int nnodes_max,
                             const std::vector<std::string>& expected_hosts) {
  const std::set<int> joined(joined_ranks.begin(), joined_ranks.end());
  std::vector<std::string> parts;
  for (int r = 0; r < nnodes_max; ++r) {
    if (joined.contains(r)) continue;
    const auto i = static_cast<std::size_t>(r);
    if (i < expected_hosts.size() && !expected_hosts[i].empty()) {
      parts.push_back(fmt::format("{} (node rank {})", expected_hosts[i], r));
    } else {
      parts.push_back(fmt::format("node rank {}", r));
    }
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::string describe_refusals(const std::vector<store::Refusal>& refusals) {
  std::vector<std::string> parts;
  for (const auto& r : refusals) {
    const auto rank = labels::main_node_rank(r.label);
    const std::string as = rank              ? fmt::format(" as node rank {}", *rank)
                           : r.label.empty() ? std::string()
                                             : fmt::format(" ('{}')", r.label);
    parts.push_back(
        fmt::format("{} connection{} from {}{}: {}", r.count, r.count == 1 ? "" : "s", r.peer, as, r.why));
  }
  if (parts.empty()) return {};
  return fmt::format("this store refused {}", fmt::join(parts, "; "));
}

}  // namespace ddprun::rdzv
