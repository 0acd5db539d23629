#pragma once
// A hand-made rank plan for rendezvous tests (unit tests and the loopback agent): ranks in node
// order, MASTER_PORT as planned.
#include <string>
#include <vector>

#include "launcher/plan.hpp"

namespace testplan {

inline ddprun::launcher::Plan simple_plan(const std::vector<ddprun::launcher::NodeSpec>& nodes,
                                          int master_port) {
  ddprun::launcher::Plan p;
  p.mode = ddprun::launcher::Mode::agent;
  p.nnodes = static_cast<int>(nodes.size());
  p.master_addr = "127.0.0.1";
  p.master_port = master_port;
  p.run_id = "run";
  int rank = 0;
  for (const auto& n : nodes) {
    for (int lr = 0; lr < n.local_world_size; ++lr) {
      ddprun::launcher::Worker w;
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

}  // namespace testplan
