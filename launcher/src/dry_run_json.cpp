// `--dry-run --format json`, streamed: the bytes core::dump_json(j, 2) would give for the whole plan
// (the worker list tests/support/whole_plan.hpp builds, plus the CLI's fields), written one node at a time.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/command.hpp"
#include "core/json.hpp"
#include "core/rank_order.hpp"
#include "launcher/dry_run.hpp"
#include "plan_writer.hpp"

namespace ddprun::launcher {

namespace {

// A JSON string as core::dump_json writes it: printable ASCII as it is, anything else (escapes,
// control characters, UTF-8, invalid bytes replaced by U+FFFD) through nlohmann itself.
void put_string(std::string& out, const std::string& s) {
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
      out += core::dump_json(nlohmann::json(s));
      return;
    }
  }
  out += '"';
  out += s;
  out += '"';
}

// One worker at the depth of the "workers" array (indent 4), keys in nlohmann's sorted order.
// A list of strings at the depth of a worker's key (indent 6).
void put_strings(std::string& out, const std::vector<std::string>& v) {
  if (v.empty()) {
    out += "[]";
    return;
  }
  out += "[\n";
  for (std::size_t i = 0; i < v.size(); ++i) {
    out += i == 0 ? "        " : ",\n        ";
    put_string(out, v[i]);
  }
  out += "\n      ]";
}

// `argv`: what this worker runs (its own --local-rank-arg); `cpus` only under --cpu-bind: the bound
// list, or null where that node's agent decides.
void put_worker(std::string& out, const core::Worker& w, const std::map<std::string, std::string>& env,
                const std::vector<std::string>& argv, bool cpus) {
  out += "    {\n      \"argv\": ";
  put_strings(out, argv);
  out += ",\n      ";
  if (cpus) {
    if (w.cpus.empty()) {
      out += "\"cpus\": null,\n      ";
    } else {
      out += "\"cpus\": [\n";
      for (std::size_t i = 0; i < w.cpus.size(); ++i) {
        fmt::format_to(std::back_inserter(out), "{}        {}", i == 0 ? "" : ",\n", w.cpus[i]);
      }
      out += "\n      ],\n      ";
    }
  }
  out += "\"env\": ";
  if (env.empty()) {
    out += "{}";
  } else {
    out += "{\n";
    bool first = true;
    for (const auto& [k, v] : env) {
      out += first ? "        " : ",\n        ";
      first = false;
      put_string(out, k);
      out += ": ";
      put_string(out, v);
    }
    out += "\n      }";
  }
  out += ",\n      \"gpus\": ";
  put_strings(out, w.gpus);
  out += ",\n      \"host\": ";
  if (w.host) {
    put_string(out, *w.host);
  } else {
    out += "null";
  }
  fmt::format_to(std::back_inserter(out),
                 ",\n      \"local_rank\": {},\n      \"node_rank\": {},\n      \"rank\": {}\n    }}",
                 w.local_rank, w.node_rank, w.rank);
}

// Everything but the workers, which stay an empty array to be filled in.
nlohmann::json skeleton(const core::Resolved& r, const core::PlanTable& t) {
  const core::JobConstants& job = t.job;
  nlohmann::json j = {{"mode", to_string(job.mode)},    {"world_size", job.world_size},
                      {"nnodes", job.nnodes},           {"node_rank", r.job.node_rank},
                      {"master_addr", job.master_addr}, {"master_port", job.master_port},
                      {"run_id", job.run_id},           {"workers", nlohmann::json::array()}};
  j["command"] = r.command;
  j["context"] = to_string(r.context);
  j["rdzv_endpoint"] = fmt::format("{}:{}", r.rdzv_host, r.rdzv_port);
  j["nnodes_min"] = r.nnodes_min;
  j["nnodes_max"] = r.nnodes_max;
  j["gpus_from_nodes"] = r.gpus_on_nodes;
  j["cpu_bind"] = core::to_string(r.cpu_bind);
  // --rdzv-iface / --local-addr only, so that other plans keep their keys: this node's advertised address
  // (null in a batch script's shell: each node looks up its own).
  if (r.rdzv_iface || !r.local_addr.empty()) {
    j["rdzv_iface"] = r.rdzv_iface ? nlohmann::json(*r.rdzv_iface) : nlohmann::json(nullptr);
    j["local_addr"] = r.local_addr.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.local_addr);
  }
  // --health-check and --requeue-on only, likewise.
  if (r.health_check)
    j["health_check"] = {{"command", *r.health_check}, {"timeout_s", r.health_check_timeout}};
  if (!r.requeue_on.empty()) {
    j["requeue_on"] = {{"codes", r.requeue_on},
                       {"max_requeues", r.max_requeues},
                       {"restart_count", r.job.requeue_count},
                       {"applies", r.context == core::SlurmContext::batch}};
  }
  // Elastic mode only (issue 14), so that fail-fast plans keep their keys.
  if (r.elastic) j["elastic"] = true;
  // --rank-order topology only, likewise: this node's switch or block; node 0 makes the order at the join.
  if (r.rank_order == core::RankOrder::topology && job.mode == core::Mode::agent) {
    const auto g = core::topology_group(r.topology_addr);
    j["rank_order"] = {{"order", "topology"},
                       {"topology_addr", r.topology_addr},
                       {"group", g.path ? nlohmann::json(*g.path) : nlohmann::json(nullptr)}};
    if (!g.path) {
      j["rank_order"]["why"] = r.context == core::SlurmContext::none
                                   ? "not under Slurm: SLURM_TOPOLOGY_ADDR is read in a Slurm job only"
                                   : g.why;
    }
  }
  nlohmann::json standbys = nlohmann::json::array();
  for (std::size_t n = 0; n < t.nodes.size(); ++n) {
    if (!t.nodes[n].standby) continue;
    const auto& host = t.nodes[n].host;
    standbys.push_back({{"node_rank", n}, {"host", host ? nlohmann::json(*host) : nlohmann::json(nullptr)}});
  }
  if (!standbys.empty()) j["standbys"] = standbys;
  return j;
}

}  // namespace

void write_plan_json(std::ostream& os, const core::Resolved& r, const core::PlanTable& t,
                     const std::vector<core::Worker>& this_node, const RunExports* exports) {
  const std::string whole = core::dump_json(skeleton(r, t), 2) + "\n";
  // Strings are escaped in the dump, so this line (two spaces: the top level) is the workers key.
  constexpr std::string_view kEmpty = "\n  \"workers\": []";
  const auto at = whole.find(kEmpty);
  ChunkedOut out(os);
  out.buf.append(whole, 0, at + kEmpty.size() - 2);
  const auto slot = core::task_slot(r.job);
  const bool cpus = r.cpu_bind != core::CpuBind::none;
  const bool batch = r.context == core::SlurmContext::batch;
  bool first = true;
  for (std::size_t n = 0; n < t.nodes.size(); ++n) {
    const bool mine = !batch && static_cast<int>(n) == r.job.node_rank;
    for (const auto& derived : core::derive_workers(t, static_cast<int>(n), slot)) {
      out.buf += first ? "[\n" : ",\n";
      first = false;
      const core::Worker& w = mine ? bound_or(derived, this_node) : derived;
      put_worker(out.buf, w, exports ? exported_env(w, *exports) : w.env,
                 core::worker_argv(r.command_spec, derived.local_rank), cpus);
    }
    out.maybe_flush();
  }
  out.buf += first ? "[]" : "\n  ]";
  out.buf.append(whole, at + kEmpty.size());
}

}  // namespace ddprun::launcher
