#pragma once
// The rank plan as ddprun built it before issue 16 (one loop over every worker of the whole job),
// kept verbatim as the reference that the table + per-node derivation must reproduce exactly.
#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/plan.hpp"
#include "support/whole_plan.hpp"

namespace ddprun::test::oldplan {

using namespace ddprun::core;

// GPUs of one local worker: a disjoint slice when G is given, else all of the node's GPUs.
inline std::vector<std::string> gpu_slice(const JobSpec& job, const NodeSpec& node, int local_rank) {
  if (job.gpus_per_proc <= 0) return node.gpus;
  const auto g = static_cast<std::size_t>(job.gpus_per_proc);
  const auto need = g * static_cast<std::size_t>(node.local_world_size);
  if (job.mode == Mode::per_task && node.gpus.size() == g) return node.gpus;  // srun already sliced per task
  if (node.gpus.size() < need || node.gpus.size() % g != 0) {
    throw Error(
        fmt::format("node {} has {} visible GPUs ({}), which cannot give {} workers {} GPUs each; "
                    "adjust --gpus-per-proc or --nproc-per-node",
                    node.node_rank, node.gpus.size(), fmt::join(node.gpus, ","), node.local_world_size,
                    job.gpus_per_proc));
  }
  auto first = node.gpus.begin() + static_cast<std::ptrdiff_t>(g * static_cast<std::size_t>(local_rank));
  return {first, first + static_cast<std::ptrdiff_t>(g)};
}

inline void check_job(const JobSpec& job) {
  if (job.nnodes < 1) throw Error(fmt::format("--nnodes {} must be at least 1", job.nnodes));
  if (job.procs_per_replica < 1) {
    throw Error(fmt::format("--procs-per-replica {} must be at least 1", job.procs_per_replica));
  }
  if (job.gpus_per_proc < 0)
    throw Error(fmt::format("--gpus-per-proc {} must be at least 1", job.gpus_per_proc));
  if (job.node_rank < 0 || job.node_rank >= job.nnodes) {
    throw Error(fmt::format("node rank {} is not below the number of nodes {}; node ranks run 0..{}",
                            job.node_rank, job.nnodes, job.nnodes - 1));
  }
}

// The nodes by node rank, checked: 0..nnodes-1, each with whole model-parallel groups.
inline std::vector<NodeSpec> sorted_nodes(const JobSpec& job, const std::vector<NodeSpec>& nodes_in) {
  std::vector<NodeSpec> nodes = nodes_in;
  std::sort(nodes.begin(), nodes.end(),
            [](const NodeSpec& a, const NodeSpec& b) { return a.node_rank < b.node_rank; });
  if (static_cast<int>(nodes.size()) != job.nnodes) {
    throw Error(fmt::format("the plan needs {} nodes but {} were described", job.nnodes, nodes.size()));
  }
  for (int i = 0; i < job.nnodes; ++i) {
    const auto& n = nodes[static_cast<std::size_t>(i)];
    if (n.node_rank != i)
      throw Error(fmt::format("node ranks must be 0..{} with no gaps or duplicates", job.nnodes - 1));
    if (n.local_world_size < 1) throw Error(fmt::format("node {} has no workers", i));
    if (n.local_world_size % job.procs_per_replica != 0) {
      throw Error(
          fmt::format("node {} runs {} workers, which is not divisible by --procs-per-replica {}; "
                      "model-parallel groups must not span nodes",
                      i, n.local_world_size, job.procs_per_replica));
    }
  }
  return nodes;
}

// The torchrun variables, ddprun's own, OMP_NUM_THREADS and NCCL's.
inline void worker_env(const JobSpec& job, const NodeSpec& n, int world_size, Worker& w) {
  const int p = job.procs_per_replica;
  const int lr = w.local_rank;
  auto& e = w.env;
  e["RANK"] = std::to_string(w.rank);
  e["LOCAL_RANK"] = std::to_string(lr);
  e["WORLD_SIZE"] = std::to_string(world_size);
  e["LOCAL_WORLD_SIZE"] = std::to_string(n.local_world_size);
  e["GROUP_RANK"] = std::to_string(n.node_rank);
  e["GROUP_WORLD_SIZE"] = std::to_string(job.nnodes);
  e["ROLE_NAME"] = job.role;
  e["ROLE_RANK"] = std::to_string(w.rank);
  e["ROLE_WORLD_SIZE"] = std::to_string(world_size);
  e["MASTER_ADDR"] = job.master_addr;
  e["MASTER_PORT"] = std::to_string(job.master_port);
  e["TORCHELASTIC_RUN_ID"] = job.run_id;
  e["TORCHELASTIC_RESTART_COUNT"] = std::to_string(job.restart_count);
  e["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(job.max_restarts);
  e["DDPRUN_REQUEUE_COUNT"] = std::to_string(job.requeue_count);
  // Issue 26 changed this one variable on purpose: node 0's agent serves the workers' store by default.
  e["TORCHELASTIC_USE_AGENT_STORE"] = job.worker_store == WorkerStore::rank0 ? "False" : "True";
  e["DDPRUN_NODE_RANK"] = std::to_string(n.node_rank);
  e["DDPRUN_NNODES"] = std::to_string(job.nnodes);
  e["DDPRUN_MP_SIZE"] = std::to_string(p);
  e["DDPRUN_MP_RANK"] = std::to_string(lr % p);
  e["DDPRUN_DP_SIZE"] = std::to_string(world_size / p);
  e["DDPRUN_DP_RANK"] = std::to_string(w.rank / p);
  if (!w.gpus.empty()) e["CUDA_VISIBLE_DEVICES"] = fmt::format("{}", fmt::join(w.gpus, ","));
  // Per-task mode: this ddprun spawns exactly one worker, so the CPU share is the whole task's.
  const int spawned_here = job.mode == Mode::per_task ? 1 : n.local_world_size;
  if (job.user_omp_num_threads) {
    e["OMP_NUM_THREADS"] = *job.user_omp_num_threads;
  } else if (job.cpus_per_task) {
    e["OMP_NUM_THREADS"] = std::to_string(std::max(1, *job.cpus_per_task / spawned_here));
  } else if (n.local_world_size > 1) {
    e["OMP_NUM_THREADS"] = "1";
  }
  if (!job.user_set_nccl_async) {
    e["NCCL_ASYNC_ERROR_HANDLING"] = "1";
    e["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1";
  }
}

inline Plan build_plan(const JobSpec& job, const std::vector<NodeSpec>& nodes_in) {
  check_job(job);
  const std::vector<NodeSpec> nodes = sorted_nodes(job, nodes_in);
  Plan plan;
  plan.mode = job.mode;
  plan.nnodes = job.nnodes;
  plan.node_rank = job.node_rank;
  plan.master_addr = job.master_addr;
  plan.master_port = job.master_port;
  plan.run_id = job.run_id;
  for (const auto& n : nodes) plan.world_size += n.local_world_size;

  int rank = 0;
  for (const auto& n : nodes) {
    for (int lr = 0; lr < n.local_world_size; ++lr, ++rank) {
      Worker w;
      w.node_rank = n.node_rank;
      w.host = n.host;
      w.rank = rank;
      w.local_rank = lr;
      w.gpus = gpu_slice(job, n, lr);
      // Per-task mode: this task's rank is Slurm's own (SLURM_PROCID), even under a non-block
      // distribution; the other tasks are shown in Slurm's default block layout.
      if (job.mode == Mode::per_task && n.node_rank == job.node_rank && job.task_rank &&
          job.task_local_rank && lr == *job.task_local_rank) {
        w.rank = *job.task_rank;
      }
      worker_env(job, n, plan.world_size, w);
      plan.workers.push_back(std::move(w));
    }
  }
  return plan;
}

}  // namespace ddprun::test::oldplan
