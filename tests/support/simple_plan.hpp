#pragma once
// A hand-made rank plan for rendezvous tests (unit tests and the loopback agent): ranks in node
// order, MASTER_PORT as planned.
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/json.hpp"
#include "core/plan.hpp"
#include "rendezvous/rendezvous.hpp"
#include "support/whole_plan.hpp"

namespace testplan {

// The joined agents as plan nodes, renumbered 0..n-1 in node-rank order.
inline std::vector<ddprun::core::NodeSpec> nodes_of(const std::vector<ddprun::rdzv::JoinInfo>& joined) {
  std::vector<ddprun::core::NodeSpec> nodes;
  for (std::size_t i = 0; i < joined.size(); ++i) {
    ddprun::core::NodeSpec n;
    n.node_rank = static_cast<int>(i);
    if (!joined[i].hostname.empty()) n.host = joined[i].hostname;
    n.local_world_size = joined[i].local_world_size;
    n.gpus = joined[i].gpus;
    nodes.push_back(n);
  }
  return nodes;
}

inline ddprun::test::Plan simple_plan(const std::vector<ddprun::core::NodeSpec>& nodes, int master_port) {
  ddprun::test::Plan p;
  p.mode = ddprun::core::Mode::agent;
  p.nnodes = static_cast<int>(nodes.size());
  p.master_addr = "127.0.0.1";
  p.master_port = master_port;
  p.run_id = "run";
  int rank = 0;
  for (const auto& n : nodes) {
    for (int lr = 0; lr < n.local_world_size; ++lr) {
      ddprun::core::Worker w;
      w.node_rank = n.node_rank;
      w.host = n.host;
      w.rank = rank++;
      w.local_rank = lr;
      w.env["RANK"] = std::to_string(w.rank);
      w.env["MASTER_PORT"] = std::to_string(master_port);
      p.workers.push_back(w);
    }
  }
  p.world_size = rank;
  return p;
}

// The rendezvous carries the plan as bytes: encode what the master builds, decode what join returns.
inline ddprun::rdzv::PlanFn plan_fn(
    std::function<ddprun::test::Plan(const std::vector<ddprun::core::NodeSpec>&)> f) {
  return [f](const std::vector<ddprun::rdzv::JoinInfo>& joined) {
    return ddprun::core::dump_json(ddprun::test::plan_to_json(f(nodes_of(joined))));
  };
}

inline ddprun::test::Plan join_plan(ddprun::rdzv::Rendezvous& r, const ddprun::rdzv::JoinInfo& me,
                                    const ddprun::rdzv::PlanFn& fn) {
  const auto joined = r.join(me, fn);
  auto plan = ddprun::test::plan_from_json(nlohmann::json::parse(joined.plan));
  plan.node_rank = joined.node_rank;
  return plan;
}

}  // namespace testplan
