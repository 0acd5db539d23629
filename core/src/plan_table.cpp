#include "core/plan_table.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/checks.hpp"

namespace ddprun::core {

namespace {

void check_job(const JobSpec& job) {
  if (job.nnodes < 1) throw Error(fmt::format("--nnodes {} must be at least 1", job.nnodes));
  if (auto e = procs_per_replica_error(job.procs_per_replica)) throw Error(*e);
  if (job.gpus_per_proc != 0) {
    if (auto e = gpus_per_proc_error(job.gpus_per_proc)) throw Error(*e);
  }
}

// The nodes by node rank, checked: 0..n-1 with the active ones first, each with whole model-parallel
// groups. Pointers into `nodes_in`: a sorted copy of 16,384 nodes would be an agent's largest allocation.
std::vector<const NodeSpec*> sorted_nodes(const JobSpec& job, const std::vector<NodeSpec>& nodes_in) {
  std::vector<const NodeSpec*> nodes;
  nodes.reserve(nodes_in.size());
  for (const auto& n : nodes_in) nodes.push_back(&n);
  // The same std::sort as on the nodes themselves: the same order, duplicates included.
  std::sort(nodes.begin(), nodes.end(),
            [](const NodeSpec* a, const NodeSpec* b) { return a->node_rank < b->node_rank; });
  const auto active =
      std::count_if(nodes.begin(), nodes.end(), [](const NodeSpec* n) { return !n->standby; });
  if (active != job.nnodes) {
    throw Error(fmt::format("the plan needs {} nodes but {} were described", job.nnodes, active));
  }
  // This node may be a standby, beyond the active ones.
  const auto all = static_cast<int>(nodes.size());
  if (job.node_rank < 0 || job.node_rank >= all) {
    throw Error(fmt::format("node rank {} is not below the number of nodes {}; node ranks run 0..{}",
                            job.node_rank, all, all - 1));
  }
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const NodeSpec& n = *nodes[i];
    if (n.node_rank != static_cast<int>(i))
      throw Error(fmt::format("node ranks must be 0..{} with no gaps or duplicates", nodes.size() - 1));
    if (n.standby != (static_cast<int>(i) >= job.nnodes))
      throw Error(fmt::format("node {}: standby nodes must follow the {} active ones", i, job.nnodes));
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

// A node whose GPUs cannot be cut into G-sized slices for each worker.
void check_gpu_slices(const JobConstants& job, const NodeRow& row, std::size_t node_rank) {
  const auto workers = static_cast<std::size_t>(row.local_world_size);
  if (job.gpus_per_proc <= 0 && job.virtual_local_rank && row.gpus.size() > 1 && row.gpus.size() < workers) {
    throw Error(fmt::format(
        "node {} has {} visible GPUs ({}), too few to give each of its {} workers one of its own for "
        "--virtual-local-rank; run fewer workers with --nproc-per-node, or give --gpus-per-proc",
        node_rank, row.gpus.size(), fmt::join(row.gpus, ","), row.local_world_size));
  }
  if (job.gpus_per_proc <= 0) return;
  const auto g = static_cast<std::size_t>(job.gpus_per_proc);
  if (job.mode == Mode::per_task && row.gpus.size() == g) return;  // srun already sliced per task
  const auto need = g * static_cast<std::size_t>(row.local_world_size);
  if (row.gpus.size() < need || row.gpus.size() % g != 0) {
    throw Error(fmt::format(
        "node {} has {} visible GPUs ({}), which cannot give {} workers {} GPUs each; "
        "adjust --gpus-per-proc or --nproc-per-node",
        node_rank, row.gpus.size(), fmt::join(row.gpus, ","), row.local_world_size, job.gpus_per_proc));
  }
}

// The torchrun variables, ddprun's own, OMP_NUM_THREADS and NCCL's.
void worker_env(const JobConstants& job, int node_rank, int local_world_size, Worker& w) {
  const int p = job.procs_per_replica;
  const int lr = w.local_rank;
  auto& e = w.env;
  e["RANK"] = std::to_string(w.rank);
  e["LOCAL_RANK"] = job.virtual_local_rank ? "0" : std::to_string(lr);
  e["WORLD_SIZE"] = std::to_string(job.world_size);
  e["LOCAL_WORLD_SIZE"] = std::to_string(local_world_size);
  e["GROUP_RANK"] = std::to_string(node_rank);
  e["GROUP_WORLD_SIZE"] = std::to_string(job.nnodes);
  e["ROLE_NAME"] = job.role;
  e["ROLE_RANK"] = std::to_string(w.rank);
  e["ROLE_WORLD_SIZE"] = std::to_string(job.world_size);
  // --worker-store relay: the workers of nodes other than 0 reach the store through their node's relay.
  const bool relayed = job.worker_store == WorkerStore::relay && node_rank != 0;
  e["MASTER_ADDR"] = relayed ? "127.0.0.1" : job.master_addr;
  e["MASTER_PORT"] =
      std::to_string(relayed ? relay_port(job.run_id, node_rank, static_cast<std::uint16_t>(job.master_port))
                             : job.master_port);
  e["TORCHELASTIC_RUN_ID"] = job.run_id;
  e["TORCHELASTIC_RESTART_COUNT"] = std::to_string(job.restart_count);
  e["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(job.max_restarts);
  e["DDPRUN_REQUEUE_COUNT"] = std::to_string(job.requeue_count);
  e["TORCHELASTIC_USE_AGENT_STORE"] = use_agent_store(job.worker_store);
  e["DDPRUN_NODE_RANK"] = std::to_string(node_rank);
  e["DDPRUN_NNODES"] = std::to_string(job.nnodes);
  e["DDPRUN_MP_SIZE"] = std::to_string(p);
  e["DDPRUN_MP_RANK"] = std::to_string(lr % p);
  e["DDPRUN_DP_SIZE"] = std::to_string(job.world_size / p);
  e["DDPRUN_DP_RANK"] = std::to_string(w.rank / p);
  if (!w.gpus.empty()) e["CUDA_VISIBLE_DEVICES"] = fmt::format("{}", fmt::join(w.gpus, ","));
  // Per-task mode: this ddprun spawns exactly one worker, so the CPU share is the whole task's.
  const int spawned_here = job.mode == Mode::per_task ? 1 : local_world_size;
  if (job.user_omp_num_threads) {
    e["OMP_NUM_THREADS"] = *job.user_omp_num_threads;
  } else if (job.cpus_per_task) {
    e["OMP_NUM_THREADS"] = std::to_string(std::max(1, *job.cpus_per_task / spawned_here));
  } else if (local_world_size > 1) {
    e["OMP_NUM_THREADS"] = "1";
  }
  if (!job.user_set_nccl_async) {
    e["NCCL_ASYNC_ERROR_HANDLING"] = "1";
    e["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1";
  }
}

}  // namespace

std::optional<TaskSlot> task_slot(const JobSpec& job) {
  if (job.mode != Mode::per_task || !job.task_rank || !job.task_local_rank) return std::nullopt;
  return TaskSlot{job.node_rank, *job.task_local_rank, *job.task_rank};
}

PlanTable make_plan_table(const JobSpec& job, const std::vector<NodeSpec>& nodes_in) {
  check_job(job);
  const std::vector<const NodeSpec*> nodes = sorted_nodes(job, nodes_in);
  PlanTable t;
  t.job = job;  // the constants, without this node's identity
  t.job.world_size = 0;
  t.nodes.reserve(nodes.size());
  for (const NodeSpec* np : nodes) {
    const NodeSpec& n = *np;
    NodeRow row{n.host, n.addr, n.standby ? -1 : t.job.world_size, n.local_world_size, n.gpus, n.standby};
    if (!n.standby) t.job.world_size += n.local_world_size;
    t.nodes.push_back(std::move(row));
  }
  for (std::size_t i = 0; i < t.nodes.size(); ++i) check_gpu_slices(t.job, t.nodes[i], i);
  return t;
}

std::vector<std::string> worker_gpus(const JobConstants& job, const NodeRow& row, int local_rank) {
  const auto g = static_cast<std::size_t>(job.gpus_per_proc);
  if (g == 0 && job.virtual_local_rank && row.gpus.size() > 1) {  // one GPU each, at its local rank
    const auto i = static_cast<std::size_t>(local_rank);
    return i < row.gpus.size() ? std::vector<std::string>{row.gpus[i]} : std::vector<std::string>{};
  }
  if (g == 0 || (job.mode == Mode::per_task && row.gpus.size() == g)) return row.gpus;
  const auto first = g * static_cast<std::size_t>(local_rank);
  if (first + g > row.gpus.size()) return {};  // not reached for a checked table
  const auto begin = row.gpus.begin() + static_cast<std::ptrdiff_t>(first);
  return {begin, begin + static_cast<std::ptrdiff_t>(g)};
}

std::vector<Worker> derive_workers(const PlanTable& table, int node_rank,
                                   const std::optional<TaskSlot>& slot) {
  if (node_rank < 0 || static_cast<std::size_t>(node_rank) >= table.nodes.size()) {
    throw Error(
        fmt::format("node rank {} is not in the plan, which has {} node(s)", node_rank, table.nodes.size()),
        1);
  }
  const NodeRow& row = table.nodes[static_cast<std::size_t>(node_rank)];
  std::vector<Worker> out;
  if (row.standby) return out;
  out.reserve(static_cast<std::size_t>(row.local_world_size));
  for (int lr = 0; lr < row.local_world_size; ++lr) {
    Worker w;
    w.node_rank = node_rank;
    w.host = row.host;
    w.rank = row.first_rank + lr;
    w.local_rank = lr;
    w.gpus = worker_gpus(table.job, row, lr);
    if (slot && slot->node_rank == node_rank && slot->local_rank == lr) w.rank = slot->rank;
    worker_env(table.job, node_rank, row.local_world_size, w);
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace ddprun::core
