#include "core/plan.hpp"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace ddprun::core {

const char* to_string(Mode m) {
  switch (m) {
    case Mode::agent:
      return "agent";
    case Mode::per_task:
      return "per-task";
    case Mode::standalone:
      return "standalone";
  }
  return "?";
}

std::vector<Worker> Plan::workers_on(int node) const {
  std::vector<Worker> out;
  for (const auto& w : workers) {
    if (w.node_rank == node) out.push_back(w);
  }
  std::sort(out.begin(), out.end(),
            [](const Worker& a, const Worker& b) { return a.local_rank < b.local_rank; });
  return out;
}

int resolve_nproc(const std::optional<std::string>& nproc, const std::vector<std::string>& gpus,
                  int gpus_per_proc, int cpu_count) {
  const int g = gpus_per_proc > 0 ? gpus_per_proc : 1;
  const int ngpus = static_cast<int>(gpus.size());
  auto per_gpu = [&]() {
    if (ngpus == 0) {
      throw Error(
          "--nproc-per-node gpu: no GPUs are visible (CUDA_VISIBLE_DEVICES, SLURM_STEP_GPUS and "
          "SLURM_JOB_GPUS are unset or empty); ask Slurm for GPUs or give a number");
    }
    if (ngpus % g != 0) {
      throw Error(
          fmt::format("{} visible GPUs ({}) are not divisible by --gpus-per-proc {}; "
                      "choose a G that divides the GPU count",
                      ngpus, fmt::join(gpus, ","), g));
    }
    return ngpus / g;
  };
  if (!nproc) {
    // Not given: one worker per GPU group when GPUs are visible, else one (torchrun's default).
    return ngpus > 0 && ngpus % g == 0 ? ngpus / g : 1;
  }
  const std::string& v = *nproc;
  if (v == "gpu") return per_gpu();
  if (v == "cpu") return std::max(1, cpu_count);
  if (v == "auto") return ngpus > 0 ? per_gpu() : std::max(1, cpu_count);
  int n = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (v.empty() || ec != std::errc() || ptr != v.data() + v.size()) {
    throw Error(fmt::format("--nproc-per-node '{}' is not valid; give a number, gpu, cpu or auto", v));
  }
  if (n < 1) throw Error(fmt::format("--nproc-per-node {} must be at least 1", v));
  return n;
}

namespace {

// GPUs of one local worker: a disjoint slice when G is given, else all of the node's GPUs.
std::vector<std::string> gpu_slice(const JobSpec& job, const NodeSpec& node, int local_rank) {
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

}  // namespace

namespace {

void check_job(const JobSpec& job) {
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
std::vector<NodeSpec> sorted_nodes(const JobSpec& job, const std::vector<NodeSpec>& nodes_in) {
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
void worker_env(const JobSpec& job, const NodeSpec& n, int world_size, Worker& w) {
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
  e["TORCHELASTIC_USE_AGENT_STORE"] = "False";
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

}  // namespace

Plan build_plan(const JobSpec& job, const std::vector<NodeSpec>& nodes_in) {
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

nlohmann::json plan_to_json(const Plan& plan) {
  nlohmann::json workers = nlohmann::json::array();
  for (const auto& w : plan.workers) {
    workers.push_back({{"node_rank", w.node_rank},
                       {"host", w.host ? nlohmann::json(*w.host) : nlohmann::json(nullptr)},
                       {"rank", w.rank},
                       {"local_rank", w.local_rank},
                       {"gpus", w.gpus},
                       {"env", w.env}});
    if (!w.cpus.empty()) workers.back()["cpus"] = w.cpus;  // bound on this node only
  }
  return {{"mode", to_string(plan.mode)},    {"world_size", plan.world_size},
          {"nnodes", plan.nnodes},           {"node_rank", plan.node_rank},
          {"master_addr", plan.master_addr}, {"master_port", plan.master_port},
          {"run_id", plan.run_id},           {"workers", workers}};
}

Plan plan_from_json(const nlohmann::json& j) {
  try {
    Plan p;
    const std::string mode = j.at("mode").get<std::string>();
    p.mode = mode == "agent" ? Mode::agent : mode == "per-task" ? Mode::per_task : Mode::standalone;
    p.world_size = j.at("world_size").get<int>();
    p.nnodes = j.at("nnodes").get<int>();
    p.node_rank = j.at("node_rank").get<int>();
    p.master_addr = j.at("master_addr").get<std::string>();
    p.master_port = j.at("master_port").get<int>();
    p.run_id = j.at("run_id").get<std::string>();
    for (const auto& wj : j.at("workers")) {
      Worker w;
      w.node_rank = wj.at("node_rank").get<int>();
      if (!wj.at("host").is_null()) w.host = wj.at("host").get<std::string>();
      w.rank = wj.at("rank").get<int>();
      w.local_rank = wj.at("local_rank").get<int>();
      w.gpus = wj.value("gpus", std::vector<std::string>{});
      w.cpus = wj.value("cpus", std::vector<int>{});
      w.env = wj.at("env").get<EnvMap>();
      p.workers.push_back(std::move(w));
    }
    return p;
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("malformed plan: {}", e.what()), 1);
  }
}

void set_master_port(Plan& plan, int port) {
  plan.master_port = port;
  for (auto& w : plan.workers) w.env["MASTER_PORT"] = std::to_string(port);
}

}  // namespace ddprun::core
