#include "launcher/dry_run.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/json.hpp"

namespace ddprun::launcher {

namespace {

bool has_run_id(const core::Plan& plan) {
  return !plan.run_id.empty() && plan.run_id != core::kNoRunId;
}

std::string rank_range(int lo, int hi) {
  return lo == hi ? std::to_string(lo) : fmt::format("{}-{}", lo, hi);
}

std::string joined(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) out += (out.empty() ? "" : " ") + a;
  return out;
}

}  // namespace

core::Plan dry_run_plan(const core::Resolved& r) {
  return core::build_plan(r.job, r.nodes);
}

std::string gpus_seen(const std::vector<core::Worker>& ws) {
  std::string out;
  bool any = false;
  for (std::size_t i = 0; i < ws.size();) {
    std::size_t j = i + 1;  // ranks i..j-1: consecutive, the same GPUs
    while (j < ws.size() && ws[j].gpus == ws[i].gpus && ws[j].rank == ws[j - 1].rank + 1) ++j;
    any = any || !ws[i].gpus.empty();
    // Appended in steps: `"" + string` trips GCC 12's -Wrestrict false positive at -O3.
    if (!out.empty()) out += ' ';
    out += rank_range(ws[i].rank, ws[j - 1].rank);
    out += ':';
    out += ws[i].gpus.empty() ? std::string("-") : fmt::format("{}", fmt::join(ws[i].gpus, ","));
    i = j;
  }
  return any ? out : "-";
}

std::string render_startup_table(const core::Plan& plan, int attempt, std::size_t max_rows) {
  struct Row {
    std::string node, host, ranks, gpus;
  };
  std::vector<Row> rows;
  for (int n = 0; n < plan.nnodes; ++n) {
    auto ws = plan.workers_on(n);
    if (ws.empty()) continue;
    rows.push_back({std::to_string(n), ws.front().host.value_or("?"),
                    rank_range(ws.front().rank, ws.back().rank), gpus_seen(ws)});
  }
  std::size_t hw = 4, rw = 5;
  for (const auto& r : rows) {
    hw = std::max(hw, r.host.size());
    rw = std::max(rw, r.ranks.size());
  }
  std::string out =
      fmt::format("ddprun: {}attempt {}: {} node{}, world size {}, master {}:{}\n",
                  has_run_id(plan) ? fmt::format("run {} ", plan.run_id) : "", attempt, plan.nnodes,
                  plan.nnodes == 1 ? "" : "s", plan.world_size, plan.master_addr, plan.master_port);
  out += fmt::format("  {:<5} {:<{}} {:<{}} {}\n", "node", "host", hw, "ranks", rw,
                     "gpus each rank sees (ranks:CUDA_VISIBLE_DEVICES)");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows.size() > max_rows && i == max_rows / 2) {
      out += fmt::format("  ... {} more nodes ...\n", rows.size() - max_rows);
      i = rows.size() - max_rows / 2 - 1;
      continue;
    }
    out += fmt::format("  {:<5} {:<{}} {:<{}} {}\n", rows[i].node, rows[i].host, hw, rows[i].ranks, rw,
                       rows[i].gpus);
  }
  return out;
}

std::string render_plan_text(const core::Resolved& r, const core::Plan& plan) {
  std::string out;
  out += fmt::format("ddprun plan: {} mode, {} node{}, world size {}, master {}:{}{}\n", to_string(plan.mode),
                     plan.nnodes, plan.nnodes == 1 ? "" : "s", plan.world_size, plan.master_addr,
                     plan.master_port,
                     has_run_id(plan) ? fmt::format(", run id {}", plan.run_id) : std::string());
  // The plan cannot bind ports: the run checks MASTER_PORT on the master when the job starts.
  out +=
      r.master_port_given
          ? fmt::format("master port {} is checked when the job starts: if it is busy then, the run stops\n",
                        plan.master_port)
          : fmt::format(
                "master port {} is checked when the job starts: if it is busy then, a free one is used\n",
                plan.master_port);
  if (r.context == core::SlurmContext::batch) {
    out += fmt::format("batch script: ddprun would re-launch itself with srun on {} node{}\n",
                       r.allocation_hosts.size(), r.allocation_hosts.size() == 1 ? "" : "s");
    if (r.gpus_on_nodes) {
      out +=
          "GPUs: none visible here; each node's agent counts its own GPUs after the re-launch, so GPU "
          "lists and worker counts below are assumptions\n";
    }
  }
  if (plan.mode != core::Mode::standalone) {
    out += fmt::format("rendezvous store: {}:{} (served by node rank 0)\n", r.rdzv_host, r.rdzv_port);
  }
  std::size_t host_w = 4;
  for (const auto& w : plan.workers) host_w = std::max(host_w, w.host ? w.host->size() : std::size_t{1});
  const bool mp = r.job.procs_per_replica > 1;
  // A batch script or salloc shell is not one of the nodes that will run workers.
  auto this_node = [&](int node_rank) {
    return r.context != core::SlurmContext::batch && node_rank == plan.node_rank;
  };
  out += fmt::format("{:<5} {:<{}} {:>5} {:>6}  {:<12}{}\n", "node", "host", host_w, "rank", "local", "gpus",
                     mp ? "  mp/dp" : "");
  for (const auto& w : plan.workers) {
    std::string gpus = w.gpus.empty() ? "-" : fmt::format("{}", fmt::join(w.gpus, ","));
    std::string mpdp =
        mp ? fmt::format("  {}/{}", w.env.at("DDPRUN_MP_RANK"), w.env.at("DDPRUN_DP_RANK")) : "";
    out += fmt::format("{:<5} {:<{}} {:>5} {:>6}  {:<12}{}{}\n", w.node_rank, w.host.value_or("?"), host_w,
                       w.rank, w.local_rank, gpus, mpdp, this_node(w.node_rank) ? "  <- this node" : "");
  }
  if (r.command_spec.local_rank_arg == core::LocalRankArg::none) {
    out += fmt::format("command: {}\n", joined(r.command));
    return out;
  }
  // Workers differ only by their local rank: one line for each.
  int max_local = -1;
  for (const auto& w : plan.workers) max_local = std::max(max_local, w.local_rank);
  for (int l = 0; l <= max_local; ++l) {
    out += fmt::format("command (local rank {}): {}\n", l, joined(core::worker_argv(r.command_spec, l)));
  }
  return out;
}

std::string render_plan_json(const core::Resolved& r, const core::Plan& plan) {
  nlohmann::json j = core::plan_to_json(plan);
  for (auto& w : j.at("workers"))
    w["argv"] = core::worker_argv(r.command_spec, w.at("local_rank").get<int>());
  j["command"] = r.command;
  j["context"] = to_string(r.context);
  j["rdzv_endpoint"] = fmt::format("{}:{}", r.rdzv_host, r.rdzv_port);
  j["nnodes_min"] = r.nnodes_min;
  j["nnodes_max"] = r.nnodes_max;
  j["gpus_from_nodes"] = r.gpus_on_nodes;
  return core::dump_json(j, 2) + "\n";
}

}  // namespace ddprun::launcher
