#include "core/per_task.hpp"

#include <fmt/format.h>

#include "core/derived_port.hpp"
#include "core/error.hpp"

namespace ddprun::core {

TaskPlace task_place(const std::vector<int>& tasks_per_node, int node, int local) {
  const int nnodes = static_cast<int>(tasks_per_node.size());
  if (node < 0 || node >= nnodes) {
    throw Error(
        fmt::format("SLURM_NODEID={} is outside the step's {} nodes; run ddprun under srun", node, nnodes));
  }
  const int tasks = tasks_per_node[static_cast<std::size_t>(node)];
  if (local < 0 || local >= tasks) {
    throw Error(fmt::format("SLURM_LOCALID={} is outside the {} tasks of node {}; run ddprun under srun",
                            local, tasks, node));
  }
  TaskPlace p;
  p.node = node;
  p.local = local;
  p.local_tasks = tasks;
  p.relay = local == 0;
  p.node0 = p.relay && node == 0;
  p.node_store = tasks > 1;
  return p;
}

std::uint16_t node_store_port(const std::string& run_id, int node, std::uint16_t store_port,
                              std::uint16_t master_port) {
  return derived_port(fmt::format("{}/node/{}", run_id, node), {store_port, master_port});
}

}  // namespace ddprun::core
