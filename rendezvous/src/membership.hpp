#pragma once
// The rounds this agent took part in (elastic membership, docs/elastic.md): the joined round, the last
// one and who of it is lost, node 0's bookkeeping across rounds and failovers. The main thread's only
// (join, next_attempt, follow, fail_over and the calls between them): no lock. The lost-agent monitor
// gets a copy of the members when it starts; the launcher reads them through Rendezvous::members().
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/elastic.hpp"

namespace ddprun::rdzv {

struct Membership {
  std::vector<core::Member> members;  // the joined round; index = node rank in the plan
  int plan_node_rank = -1;            // this agent's there
  bool joined = false;
  std::chrono::steady_clock::time_point plan_published{};  // node 0: when the plan went out
  // Elastic: the last round's members, and who of them is known to be gone (node ranks there).
  std::vector<core::Member> previous;
  std::vector<int> previous_lost;
  std::map<int, std::string> topology_addrs;  // node 0: the last round's topology addresses by orig rank
  int failovers = 0;
  std::vector<std::pair<std::string, std::uint16_t>> past_stores;  // endpoints before each failover

  // The nodes the liveness timing and a barrier count: the round's, else `otherwise` (before a join).
  int nnodes(int otherwise) const { return joined ? static_cast<int>(members.size()) : otherwise; }
  // The round ended (next_attempt, follow): it becomes the previous one, with `lost` its lost node ranks.
  void end_round(std::vector<int> lost) {
    if (joined) previous = std::move(members);
    previous_lost = std::move(lost);
  }
  void clear_round() {
    members.clear();
    plan_node_rank = -1;
    joined = false;
  }
  // The host of node rank `orig_rank`: the round's, else the one given for it (expected_hosts).
  std::string host_of(int orig_rank, const std::vector<std::string>& expected_hosts) const {
    const auto m = std::find_if(members.begin(), members.end(),
                                [&](const core::Member& p) { return p.orig_rank == orig_rank; });
    if (m != members.end()) return m->host;
    const auto i = static_cast<std::size_t>(orig_rank);
    if (orig_rank >= 0 && i < expected_hosts.size()) return expected_hosts[i];
    return {};
  }
};

}  // namespace ddprun::rdzv
