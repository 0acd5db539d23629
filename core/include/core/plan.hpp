#pragma once
// The rank plan: every worker of the whole job, with the exact environment ddprun exports to each.
// It is built through the node table (core/plan_table.hpp): the table is what the rendezvous master
// publishes from the nodes that actually joined, and each worker is derived from it by the same
// function (core::derive_workers) in --dry-run and on every agent, so all agree on the layout.
#include <array>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/enum_names.hpp"
#include "core/error.hpp"
#include "core/gpu_list.hpp"
#include "core/worker_store.hpp"

namespace ddprun::core {

enum class Mode {
  agent,       // one ddprun per node spawns that node's workers
  per_task,    // srun started several tasks on a node: each ddprun is exactly one worker
  standalone,  // no Slurm, single node
};
inline constexpr std::array<EnumName<Mode>, 3> kModeNames{
    {{Mode::agent, "agent"}, {Mode::per_task, "per-task"}, {Mode::standalone, "standalone"}}};
const char* to_string(Mode m);

// One node as the plan sees it.
struct NodeSpec {
  int node_rank = 0;
  std::optional<std::string> host;  // unknown for other nodes outside Slurm
  int local_world_size = 1;         // workers on this node
  GpuList gpus;                     // GPU ids visible on the node, as given (may be empty)
  std::string addr;                 // where the other nodes reach it (rendezvous); empty when unknown
  bool spare = false;               // issue 14 (elastic): runs no workers; spares follow the active nodes
};

// TORCHELASTIC_RUN_ID when neither Slurm nor --rdzv-id gives one (torchrun's default too). Messages
// for people leave it out rather than print "run none".
inline constexpr const char* kNoRunId = "none";

// Job-wide settings that are the same on every node.
struct JobSpec {
  Mode mode = Mode::standalone;
  int nnodes = 1;
  int node_rank = 0;          // the node this ddprun runs on
  int gpus_per_proc = 0;      // G; 0 = not given: workers see all of the node's GPUs
  int procs_per_replica = 1;  // P
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string run_id = kNoRunId;
  int restart_count = 0;  // restarts of this launch (--max-restarts): TORCHELASTIC_RESTART_COUNT
  int requeue_count = 0;  // SLURM_RESTART_COUNT: how often Slurm requeued the job (DDPRUN_REQUEUE_COUNT)
  int max_restarts = 0;
  std::string role = "default";
  std::optional<std::string> user_omp_num_threads;  // the user's OMP_NUM_THREADS, kept as is
  std::optional<int> cpus_per_task;                 // SLURM_CPUS_PER_TASK
  std::optional<int> task_rank;                     // per-task mode: SLURM_PROCID of this task
  std::optional<int> task_local_rank;               // per-task mode: SLURM_LOCALID of this task
  bool user_set_nccl_async = false;                 // user already set (TORCH_)NCCL_ASYNC_ERROR_HANDLING
  WorkerStore worker_store = WorkerStore::agent;    // --worker-store: who serves init_process_group's store
  bool virtual_local_rank = false;                  // --virtual-local-rank (plan_table.hpp)
};

using EnvMap = std::map<std::string, std::string>;

struct Worker {
  int node_rank = 0;
  std::optional<std::string> host;
  int rank = 0;
  int local_rank = 0;
  std::vector<std::string> gpus;  // this worker's CUDA_VISIBLE_DEVICES
  EnvMap env;                     // every variable ddprun exports to it
  std::vector<int> cpus;          // CPUs it is bound to (--cpu-bind, this node only); empty: not bound
};

struct Plan {
  Mode mode = Mode::standalone;
  int world_size = 0;
  int nnodes = 0;
  int node_rank = 0;
  std::string master_addr;
  int master_port = 0;
  std::string run_id;
  std::vector<Worker> workers;  // the whole job, ordered by rank

  // Workers of one node, in local-rank order.
  std::vector<Worker> workers_on(int node_rank) const;
};

// Builds the whole plan: make_plan_table, then derive_workers for every node (core/plan_table.hpp).
// `nodes` holds one entry per node rank (any order); spares run no workers.
// Throws Error for impossible layouts (GPUs not divisible by G, workers not divisible by P, ...).
Plan build_plan(const JobSpec& job, const std::vector<NodeSpec>& nodes);

// Workers one node runs for `--nproc-per-node` (N | gpu | cpu | auto | unset), given its GPUs and CPUs.
int resolve_nproc(const std::optional<std::string>& nproc, const std::vector<std::string>& gpus,
                  int gpus_per_proc, int cpu_count);

// The whole plan as JSON: what `--dry-run --format json` prints (launcher/dry_run.cpp streams the same
// bytes without building the tree). The rendezvous publishes the compact table instead.
nlohmann::json plan_to_json(const Plan& plan);
Plan plan_from_json(const nlohmann::json& j);

}  // namespace ddprun::core
