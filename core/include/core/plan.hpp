#pragma once
// The plan's inputs: the job's constants and this node (JobSpec), the nodes (NodeSpec), and the worker
// with its exact environment. The plan itself is the node table (core/plan_table.hpp): node 0 makes it
// from the nodes that actually joined, and each node's workers are derived from it by the same
// function (core::derive_workers) in --dry-run and on every agent, so all agree on the layout.
#include <array>
#include <map>
#include <optional>
#include <string>
#include <vector>

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
  bool standby = false;             // issue 14 (elastic): runs no workers; standbys follow the active nodes
};

// TORCHELASTIC_RUN_ID when neither Slurm nor --rdzv-id gives one (torchrun's default too). Messages
// for people leave it out rather than print "run none".
inline constexpr const char* kNoRunId = "none";

// What is the same for every node of the job: what node 0 publishes (core/plan_table.hpp) and every
// worker's environment follows from.
struct JobConstants {
  Mode mode = Mode::standalone;
  int world_size = 0;  // workers of the active nodes: counted by make_plan_table from the rows
  int nnodes = 1;      // active nodes (GROUP_WORLD_SIZE); standby rows are not counted
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string run_id = kNoRunId;
  int gpus_per_proc = 0;      // G; 0 = not given: workers see all of the node's GPUs
  int procs_per_replica = 1;  // P
  int restart_count = 0;      // restarts of this launch (--max-restarts): TORCHELASTIC_RESTART_COUNT
  int requeue_count = 0;      // SLURM_RESTART_COUNT: how often Slurm requeued the job (DDPRUN_REQUEUE_COUNT)
  int max_restarts = 0;
  std::string role = "default";
  std::optional<std::string> user_omp_num_threads;  // the user's OMP_NUM_THREADS, kept as is
  std::optional<int> cpus_per_task;                 // SLURM_CPUS_PER_TASK
  bool user_set_nccl_async = false;                 // user already set (TORCH_)NCCL_ASYNC_ERROR_HANDLING
  WorkerStore worker_store = WorkerStore::agent;    // --worker-store: who serves init_process_group's store
  // --virtual-local-rank: every worker's LOCAL_RANK is 0 and its CUDA_VISIBLE_DEVICES names only its
  // own GPUs (its slice; without G, the node's GPU at its local rank), so each sees its device as cuda:0.
  bool virtual_local_rank = false;
  bool operator==(const JobConstants&) const = default;
};

// The inputs of a plan as this node resolved them (core::resolve): the job's constants, then who this
// node is. world_size is not an input: make_plan_table counts it.
struct JobSpec : JobConstants {
  int node_rank = 0;                   // the node this ddprun runs on
  std::optional<int> task_rank;        // per-task mode: SLURM_PROCID of this task
  std::optional<int> task_local_rank;  // per-task mode: SLURM_LOCALID of this task
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

// Workers one node runs for `--nproc-per-node` (N | gpu | cpu | auto | unset), given its GPUs and CPUs.
int resolve_nproc(const std::optional<std::string>& nproc, const std::vector<std::string>& gpus,
                  int gpus_per_proc, int cpu_count);

}  // namespace ddprun::core
