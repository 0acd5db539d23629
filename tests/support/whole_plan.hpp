#pragma once
// The whole job's plan at once, every worker with its environment: the reference the tests check the
// node table against (core::make_plan_table + core::derive_workers, what ddprun itself uses). ddprun
// never builds it: node 0 publishes the table and each agent derives only its own node's workers;
// --dry-run streams the same JSON node by node (launcher/dry_run_json.cpp).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/json.hpp"
#include "core/plan.hpp"
#include "core/plan_table.hpp"

namespace ddprun::test {

struct Plan {
  core::Mode mode = core::Mode::standalone;
  int world_size = 0;
  int nnodes = 0;
  int node_rank = 0;
  std::string master_addr;
  int master_port = 0;
  std::string run_id;
  std::vector<core::Worker> workers;  // the whole job, ordered by rank

  // Workers of one node, in local-rank order.
  std::vector<core::Worker> workers_on(int node) const {
    std::vector<core::Worker> out;
    for (const auto& w : workers) {
      if (w.node_rank == node) out.push_back(w);
    }
    std::sort(out.begin(), out.end(),
              [](const core::Worker& a, const core::Worker& b) { return a.local_rank < b.local_rank; });
    return out;
  }
};

// make_plan_table, then derive_workers for every node. Throws core::Error as make_plan_table does.
inline Plan build_plan(const core::JobSpec& job, const std::vector<core::NodeSpec>& nodes) {
  const core::PlanTable table = core::make_plan_table(job, nodes);
  Plan plan;
  plan.mode = job.mode;
  plan.nnodes = job.nnodes;
  plan.node_rank = job.node_rank;
  plan.master_addr = job.master_addr;
  plan.master_port = job.master_port;
  plan.run_id = job.run_id;
  plan.world_size = table.job.world_size;
  plan.workers.reserve(static_cast<std::size_t>(plan.world_size));
  const auto slot = core::task_slot(job);
  for (std::size_t n = 0; n < table.nodes.size(); ++n) {
    for (auto& w : core::derive_workers(table, static_cast<int>(n), slot))
      plan.workers.push_back(std::move(w));
  }
  return plan;
}

// The same keys as `--dry-run --format json` (without the CLI's own fields).
inline nlohmann::json plan_to_json(const Plan& plan) {
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
  return {{"mode", core::to_string(plan.mode)},
          {"world_size", plan.world_size},
          {"nnodes", plan.nnodes},
          {"node_rank", plan.node_rank},
          {"master_addr", plan.master_addr},
          {"master_port", plan.master_port},
          {"run_id", plan.run_id},
          {"workers", workers}};
}

// Throws core::Error("malformed plan: ...") on any missing or mistyped field.
inline Plan plan_from_json(const nlohmann::json& j) {
  try {
    Plan p;
    const std::string mode = j.at("mode").get<std::string>();
    p.mode = mode == "agent"      ? core::Mode::agent
             : mode == "per-task" ? core::Mode::per_task
                                  : core::Mode::standalone;
    p.world_size = core::json_int<int>(j, "world_size");
    p.nnodes = core::json_int<int>(j, "nnodes");
    p.node_rank = core::json_int<int>(j, "node_rank");
    p.master_addr = j.at("master_addr").get<std::string>();
    p.master_port = core::json_int<int>(j, "master_port");
    p.run_id = j.at("run_id").get<std::string>();
    for (const auto& wj : j.at("workers")) {
      core::Worker w;
      w.node_rank = core::json_int<int>(wj, "node_rank");
      if (!wj.at("host").is_null()) w.host = wj.at("host").get<std::string>();
      w.rank = core::json_int<int>(wj, "rank");
      w.local_rank = core::json_int<int>(wj, "local_rank");
      w.gpus = wj.value("gpus", std::vector<std::string>{});
      w.cpus = wj.contains("cpus") ? core::json_ints<int>(wj.at("cpus")) : std::vector<int>{};
      w.env = wj.at("env").get<core::EnvMap>();
      p.workers.push_back(std::move(w));
    }
    return p;
  } catch (const nlohmann::json::exception& e) {
    throw core::Error(fmt::format("malformed plan: {}", e.what()), 1);
  }
}

}  // namespace ddprun::test
