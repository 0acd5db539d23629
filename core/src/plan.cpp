#include "core/plan.hpp"

#include "core/plan_table.hpp"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/json.hpp"

namespace ddprun::core {

const char* to_string(Mode m) {
  return name_of(kModeNames, m, "?");
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

Plan build_plan(const JobSpec& job, const std::vector<NodeSpec>& nodes) {
  const PlanTable table = make_plan_table(job, nodes);
  Plan plan;
  plan.mode = job.mode;
  plan.nnodes = job.nnodes;
  plan.node_rank = job.node_rank;
  plan.master_addr = job.master_addr;
  plan.master_port = job.master_port;
  plan.run_id = job.run_id;
  plan.world_size = table.job.world_size;
  plan.workers.reserve(static_cast<std::size_t>(plan.world_size));
  const auto slot = task_slot(job);
  for (std::size_t n = 0; n < table.nodes.size(); ++n) {
    for (auto& w : derive_workers(table, static_cast<int>(n), slot)) plan.workers.push_back(std::move(w));
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
    p.world_size = json_int<int>(j, "world_size");
    p.nnodes = json_int<int>(j, "nnodes");
    p.node_rank = json_int<int>(j, "node_rank");
    p.master_addr = j.at("master_addr").get<std::string>();
    p.master_port = json_int<int>(j, "master_port");
    p.run_id = j.at("run_id").get<std::string>();
    for (const auto& wj : j.at("workers")) {
      Worker w;
      w.node_rank = json_int<int>(wj, "node_rank");
      if (!wj.at("host").is_null()) w.host = wj.at("host").get<std::string>();
      w.rank = json_int<int>(wj, "rank");
      w.local_rank = json_int<int>(wj, "local_rank");
      w.gpus = wj.value("gpus", std::vector<std::string>{});
      w.cpus = wj.contains("cpus") ? json_ints<int>(wj.at("cpus")) : std::vector<int>{};
      w.env = wj.at("env").get<EnvMap>();
      p.workers.push_back(std::move(w));
    }
    return p;
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("malformed plan: {}", e.what()), 1);
  }
}

}  // namespace ddprun::core
