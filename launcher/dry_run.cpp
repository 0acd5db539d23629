#include "launcher/dry_run.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace ddprun::launcher {

Plan dry_run_plan(const Resolved& r) { return build_plan(r.job, r.nodes); }

std::string render_plan_text(const Resolved& r, const Plan& plan) {
  std::string out;
  out += fmt::format("ddprun plan: {} mode, {} node{}, world size {}, master {}:{}, run id {}\n", to_string(plan.mode),
                     plan.nnodes, plan.nnodes == 1 ? "" : "s", plan.world_size, plan.master_addr, plan.master_port,
                     plan.run_id);
  if (r.context == SlurmContext::batch) {
    out += fmt::format("batch script: ddprun would re-launch itself with srun on {} node{}\n",
                       r.allocation_hosts.size(), r.allocation_hosts.size() == 1 ? "" : "s");
  }
  if (plan.mode != Mode::standalone) {
    out += fmt::format("rendezvous store: {}:{} (served by node rank 0)\n", r.rdzv_host, r.rdzv_port);
  }
  std::size_t host_w = 4;
  for (const auto& w : plan.workers) host_w = std::max(host_w, w.host ? w.host->size() : std::size_t{1});
  const bool mp = r.job.procs_per_replica > 1;
  out += fmt::format("{:<5} {:<{}} {:>5} {:>6}  {:<12}{}\n", "node", "host", host_w, "rank", "local", "gpus",
                     mp ? "  mp/dp" : "");
  for (const auto& w : plan.workers) {
    std::string gpus = w.gpus.empty() ? "-" : fmt::format("{}", fmt::join(w.gpus, ","));
    std::string mpdp = mp ? fmt::format("  {}/{}", w.env.at("DDPRUN_MP_RANK"), w.env.at("DDPRUN_DP_RANK")) : "";
    out += fmt::format("{:<5} {:<{}} {:>5} {:>6}  {:<12}{}{}\n", w.node_rank, w.host.value_or("?"), host_w, w.rank,
                       w.local_rank, gpus, mpdp, w.node_rank == plan.node_rank ? "  <- this node" : "");
  }
  std::string cmd;
  for (const auto& a : r.command) cmd += (cmd.empty() ? "" : " ") + a;
  out += fmt::format("command: {}\n", cmd);
  return out;
}

std::string render_plan_json(const Resolved& r, const Plan& plan) {
  nlohmann::json j = plan_to_json(plan);
  j["command"] = r.command;
  j["context"] = to_string(r.context);
  j["rdzv_endpoint"] = fmt::format("{}:{}", r.rdzv_host, r.rdzv_port);
  j["nnodes_min"] = r.nnodes_min;
  j["nnodes_max"] = r.nnodes_max;
  return j.dump(2) + "\n";
}

}  // namespace ddprun::launcher
