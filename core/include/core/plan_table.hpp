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

// What is the same for every node of the job.
struct JobConstants {
  Mode mode = Mode::standalone;
  int world_size = 0;  // workers of the active nodes
  int nnodes = 1;      // active nodes (GROUP_WORLD_SIZE); spare rows are not counted
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string run_id = kNoRunId;
  int gpus_per_proc = 0;      // G; 0 = workers see all of the node's GPUs
  int procs_per_replica = 1;  // P
  int restart_count = 0;
  int requeue_count = 0;
  int max_restarts = 0;
  std::string role = "default";
  std::optional<std::string> user_omp_num_threads;
  std::optional<int> cpus_per_task;
  bool user_set_nccl_async = false;
  WorkerStore worker_store = WorkerStore::agent;
  // --virtual-local-rank: every worker's LOCAL_RANK is 0 and its CUDA_VISIBLE_DEVICES names only its
  // own GPUs (its slice; without G, the node's GPU at its local rank), so each sees its device as cuda:0.
  bool virtual_local_rank = false;
  bool operator==(const JobConstants&) const = default;
};

// One node; its node rank is its index in the table.
struct NodeRow {
  std::optional<std::string> host;
  std::string addr;    // where the other nodes reach it; empty when unknown
  int first_rank = 0;  // rank of its local rank 0 (-1 on a spare)
  int local_world_size = 1;
  GpuList gpus;        // shared with the rows that see the same GPUs
  bool spare = false;  // issue 14 (elastic): a spare node runs no workers
  bool operator==(const NodeRow&) const = default;
};

// Spare rows, if any, follow the active ones (node ranks nnodes..size-1).
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

// The workers of one node (none on a spare), in local-rank order, each with its full environment.
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
