#pragma once
// Per-task mode's node relay (docs/rendezvous.md, "Per-task mode"): local task 0 of each node speaks
// for its node to node 0's store, the node's other tasks talk to it over a store on 127.0.0.1.
// Pure decisions only: who relays, where the node-local store listens, which ranks a node holds.
#include <cstdint>
#include <string>
#include <vector>

namespace ddprun::core {

// One task's place in a per-task step.
struct TaskPlace {
  int node = 0;             // SLURM_NODEID: the node's rank among the step's nodes
  int local = 0;            // SLURM_LOCALID
  int local_tasks = 1;      // tasks on this node
  bool relay = false;       // local task 0: joins node 0's store for the whole node
  bool node0 = false;       // the relay of node 0: serves the job's store
  bool node_store = false;  // the node has other tasks, so a node-local store is served (by the relay)
};

// Throws core::Error when node or local is outside the step's layout.
TaskPlace task_place(const std::vector<int>& tasks_per_node, int node, int local);

// The node-local store's port: derived from the run id and the node, so every task of a node finds
// it without talking, nodes sharing one host (a test cluster) differ, and concurrent steps of one
// allocation rarely collide. Never the job store's or the workers' master port. Range as
// derive_ports (below Linux's ephemeral ports).
std::uint16_t node_store_port(const std::string& run_id, int node, std::uint16_t store_port,
                              std::uint16_t master_port);

}  // namespace ddprun::core
