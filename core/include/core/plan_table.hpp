#pragma once
// The plan in its published form (issue 16): the job's constants plus one row per node. Every
// worker and its whole environment follow from (constants, table, node rank) by derive_workers, the
// one derivation that --dry-run and every agent use; so the rendezvous publishes O(nodes) bytes and
// each agent derives only its own node's workers.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/plan.hpp"

namespace ddprun::core {

// One node; its node rank is its index in the table.
struct NodeRow {
  std::optional<std::string> host;
  std::string addr;    // where the other nodes reach it; empty when unknown
  int first_rank = 0;  // rank of its local rank 0 (-1 on a standby)
  int local_world_size = 1;
  GpuList gpus;          // shared with the rows that see the same GPUs
  bool standby = false;  // issue 14 (elastic): a standby node runs no workers
  bool operator==(const NodeRow&) const = default;
};

// Standby rows, if any, follow the active ones (node ranks nnodes..size-1).
struct PlanTable {
  JobConstants job;
  std::vector<NodeRow> nodes;
  bool operator==(const PlanTable&) const = default;
};

// Per-task mode: the one worker whose rank is Slurm's own (SLURM_PROCID), whatever the layout.
struct TaskSlot {
  int node_rank = 0;
  int local_rank = 0;
  int rank = 0;
};
std::optional<TaskSlot> task_slot(const JobSpec& job);

// The table for `nodes` (one per node rank 0..n-1, any order). Checks everything that can make a
// layout impossible (GPUs not divisible by G, workers not divisible by P, ...), so that deriving
// any node afterwards cannot fail. Throws Error.
PlanTable make_plan_table(const JobSpec& job, const std::vector<NodeSpec>& nodes);

// The workers of one node (none on a standby), in local-rank order, each with its full environment.
// Throws Error when node_rank is not a row of the table.
std::vector<Worker> derive_workers(const PlanTable& table, int node_rank,
                                   const std::optional<TaskSlot>& slot = std::nullopt);

// The GPUs (CUDA_VISIBLE_DEVICES) of one local rank of a row.
std::vector<std::string> worker_gpus(const JobConstants& job, const NodeRow& row, int local_rank);

// The compact published form (docs/protocol.md, "The plan"): a few lines of constants, the distinct
// GPU lists, then one short line per node. decode checks everything and throws Error("malformed
// plan: ...") on any bad input; decode(encode(t)) == t.
std::string encode_plan_table(const PlanTable& table);
PlanTable decode_plan_table(std::string_view bytes);

}  // namespace ddprun::core
