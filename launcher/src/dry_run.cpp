#include "launcher/dry_run.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "agent/hang_watch.hpp"
#include "agent/live_stacks.hpp"
#include "agent/log_paths.hpp"
#include "agent/private_dir.hpp"
#include "agent/python_error.hpp"
#include "core/advertised.hpp"
#include "core/command.hpp"
#include "core/elastic.hpp"
#include "core/rank_order.hpp"
#include "core/requeue.hpp"
#include "plan_writer.hpp"

namespace ddprun::launcher {

namespace {

bool has_run_id(const core::JobConstants& job) {
  return !job.run_id.empty() && job.run_id != core::kNoRunId;
}

std::string rank_range(int lo, int hi) {
  return lo == hi ? std::to_string(lo) : fmt::format("{}-{}", lo, hi);
}

std::string cpu_bind_line(const core::Resolved& r) {
  if (r.cpu_bind == core::CpuBind::none) return "";
  const char* mode = core::to_string(r.cpu_bind);
  if (r.context == core::SlurmContext::batch) {
    return fmt::format(
        "cpu binding: {}, decided by each node's agent on its own topology after the re-launch\n", mode);
  }
  return fmt::format(
      "cpu binding: {}; cpus are this node's (from hwloc and this process's affinity); other nodes decide "
      "their own when they start (?)\n",
      mode);
}

// Elastic mode (issue 14): how far the job may shrink and how many standbys wait. Empty when fail-fast.
// The floor is MIN, or higher where the strict majority rule stops the job first (core::shrink_floor).
std::string elastic_line(const core::Resolved& r) {
  if (!r.elastic) return "";
  if (const auto none = core::survives_no_loss(r.nagents, r.nnodes_min)) {
    return fmt::format("elastic (--max-restarts {}), but {}\n", r.job.max_restarts, *none);
  }
  const int standbys = r.nagents - r.job.nnodes;
  const std::string take_place =
      standbys == 0 ? "no standby nodes"
                    : fmt::format("{} standby node{} take{} a lost node's place first", standbys,
                                  standbys == 1 ? "" : "s", standbys == 1 ? "s" : "");
  const int floor = std::min(core::shrink_floor(r.nagents, r.nnodes_min), r.nnodes_max);
  return fmt::format(
      "elastic: a lost node restarts the job without it (--max-restarts {}) while at least {} of {} nodes "
      "remain; {}; each loss must leave a strict majority of the last round (docs/elastic.md)\n",
      r.job.max_restarts, floor, r.nnodes_max, take_place);
}

// --rank-order topology: each node knows only its own SLURM_TOPOLOGY_ADDR, so the order is made by node 0
// when the nodes join; the plan shows this node's switch or block, or why it has none.
std::string rank_order_line(const core::Resolved& r) {
  if (r.rank_order != core::RankOrder::topology || r.job.mode != core::Mode::agent) return {};
  if (r.context == core::SlurmContext::none) {
    return "rank order: topology (--rank-order): not under Slurm, so no node has a SLURM_TOPOLOGY_ADDR (read "
           "in a Slurm job only): the node ranks stay as --node-rank gives them\n";
  }
  const auto g = core::topology_group(r.topology_addr);
  return fmt::format(
      "rank order: topology (--rank-order): node 0 orders the node ranks by each node's SLURM_TOPOLOGY_ADDR "
      "when they join (its own switch or block first, Slurm's order within each, nodes without one last) and "
      "prints the order; the table below is in Slurm's order. This node ({}): {}\n",
      r.self.host.value_or("?"),
      g.path ? fmt::format("switch/block {} (SLURM_TOPOLOGY_ADDR {})", *g.path, r.topology_addr)
             : fmt::format("{}: it would come after the nodes with one", g.why));
}

// Who serves init_process_group's store on the master port (docs/rendezvous.md, "The workers' store").
std::string worker_store_line(const core::JobConstants& job) {
  switch (job.worker_store) {
    case core::WorkerStore::agent:
      return "workers' store: served by node 0's agent on the master port (--worker-store agent)\n";
    case core::WorkerStore::rank0:
      return "workers' store: hosted by worker rank 0 on the master port (--worker-store rank0)\n";
    case core::WorkerStore::relay:
      return "workers' store: served by node 0's agent; the other nodes' workers reach it through their "
             "agent's relay on 127.0.0.1 (--worker-store relay)\n";
  }
  return {};
}

// HOST:PORT, an IPv6 address in brackets ([fd00::1]:29500) so that the port stays readable.
std::string host_port(const std::string& host, int port) {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port)
                                             : fmt::format("{}:{}", host, port);
}

// --rdzv-iface / --local-addr: the address this node advertises and what it becomes.
std::string address_line(const core::Resolved& r) {
  const std::string from =
      r.rdzv_iface ? fmt::format(" (--rdzv-iface {})", *r.rdzv_iface) : " (--local-addr)";
  const std::string master =
      r.master_addr_given
          ? "MASTER_ADDR stays --master-addr's"
          : "node 0's becomes MASTER_ADDR and the workers' store's address when the job starts";
  if (r.local_addr.empty()) {
    if (!r.rdzv_iface) return {};
    return fmt::format("addresses: each node advertises its own address on {}{}; {}\n", *r.rdzv_iface, from,
                       master);
  }
  if (r.job.node_rank != 0 || r.context == core::SlurmContext::batch) {
    return fmt::format("addresses: this node advertises {}{}; {}\n", r.local_addr, from, master);
  }
  return fmt::format(
      "addresses: this node advertises {}{}; {}\n", r.local_addr, from,
      r.master_addr_given ? master : "as node 0, it is MASTER_ADDR and the workers' store's address");
}

// --health-check and --requeue-on, which act before the first worker and after the last one: shown, so
// that a typo in either is seen before the job runs.
std::string health_requeue_lines(const core::Resolved& r) {
  std::string out;
  if (r.health_check) {
    out += fmt::format(
        "health check: {} runs sh -c '{}' before its first rendezvous round and before each restart's, for "
        "at most {:g} s; a node whose check fails or times out exits 125 (--health-check)\n",
        r.job.mode == core::Mode::per_task ? "each node's local task 0" : "each agent", *r.health_check,
        r.health_check_timeout);
  }
  if (!r.requeue_on.empty()) {
    const std::string codes = core::format_exit_codes(r.requeue_on);
    out += r.context == core::SlurmContext::batch
               ? fmt::format(
                     "requeue: a job ending with exit code {} is requeued (scontrol requeue) while "
                     "SLURM_RESTART_COUNT ({}) is below --max-requeues {} (--requeue-on)\n",
                     codes, r.job.requeue_count, r.max_requeues)
               : fmt::format(
                     "requeue: --requeue-on {} has no effect here: only a batch script's ddprun, which "
                     "re-launches itself, requeues the job\n",
                     codes);
  }
  return out;
}

// The text header: mode, sizes, ports, the batch and store lines.
std::string text_header(const core::Resolved& r, const core::JobConstants& job) {
  std::string out;
  out += fmt::format("ddprun plan: {} mode, {} node{}, world size {}, master {}{}\n", to_string(job.mode),
                     job.nnodes, job.nnodes == 1 ? "" : "s", job.world_size,
                     host_port(job.master_addr, job.master_port),
                     has_run_id(job) ? fmt::format(", run id {}", job.run_id) : std::string());
  // The plan cannot bind ports: the run checks MASTER_PORT on the master when the job starts.
  out +=
      r.master_port_given
          ? fmt::format("master port {} is checked when the job starts: if it is busy then, the run stops\n",
                        job.master_port)
          : fmt::format(
                "master port {} is checked when the job starts: if it is busy then, a free one is used\n",
                job.master_port);
  out += worker_store_line(job);
  if (job.virtual_local_rank) {
    out +=
        "virtual local rank: every worker gets LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES naming only the GPUs "
        "in its row, its cuda:0 (--virtual-local-rank); the local column is ddprun's own\n";
  }
  if (r.context == core::SlurmContext::batch) {
    out += fmt::format("batch script: ddprun would re-launch itself with srun on {} node{}\n",
                       r.allocation_hosts.size(), r.allocation_hosts.size() == 1 ? "" : "s");
    if (r.gpus_on_nodes) {
      out +=
          "GPUs: none visible here; each node's agent counts its own GPUs after the re-launch, so GPU "
          "lists and worker counts below are assumptions\n";
    }
  }
  if (job.mode != core::Mode::standalone) {
    out += r.rdzv_port == 0
               ? fmt::format("rendezvous store: {}, on a free port that node rank 0 prints when it starts\n",
                             r.rdzv_host)
               : fmt::format("rendezvous store: {}:{} (served by node rank 0)\n", r.rdzv_host, r.rdzv_port);
  }
  return out + address_line(r) + elastic_line(r) + cpu_bind_line(r) + rank_order_line(r) +
         health_requeue_lines(r);
}

std::string joined(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) out += (out.empty() ? "" : " ") + a;
  return out;
}

}  // namespace

RunExports run_exports(const agent::AgentOptions& ao, const std::vector<std::string>& agent_env) {
  RunExports x;
  x.log_dir = ao.log_dir;
  x.requeue = ao.requeue;
  x.hang = ao.hang_timeout.has_value();
  x.heartbeat = x.hang || ao.max_restarts_without_progress > 0;
  x.python = agent::python_worker(agent::command_spec(ao));
  for (const auto& kv : agent_env) {
    if (kv.rfind("PYTHONFAULTHANDLER=", 0) == 0) x.user_faulthandler.push_back(kv);
    if (kv.rfind("PYTHONPATH=", 0) == 0) x.python_path = kv.substr(std::string_view("PYTHONPATH=").size());
  }
  x.error_dir = agent::PrivateDir::name_template(agent::kErrorFilesDir);
  x.heartbeat_dir = agent::PrivateDir::name_template(agent::kHeartbeatDir);
  x.stacks_dir = agent::PrivateDir::name_template(agent::kStacksDir);
  return x;
}

std::map<std::string, std::string> exported_env(const core::Worker& w, const RunExports& x) {
  // The same derivations as the supervisor's (HeartbeatFiles::create, heartbeat_env, the stacks hook,
  // ErrorFiles::prepare).
  std::map<std::string, std::string> env = w.env;
  if (x.heartbeat) {
    env = agent::heartbeat_env(std::move(env), x.user_faulthandler,
                               agent::worker_heartbeat_file(x.log_dir, x.requeue, 0, w.rank, x.heartbeat_dir),
                               x.python, x.hang);
  }
  const auto own = env.find("PYTHONPATH");
  const std::string their_path = own != env.end() ? own->second : x.python_path;
  env = agent::stacks_hook_env(std::move(env), their_path, x.stacks_dir, w.rank);
  env["TORCHELASTIC_ERROR_FILE"] = agent::worker_error_file(x.log_dir, x.requeue, 0, w.rank, x.error_dir);
  return env;
}

const core::Worker& bound_or(const core::Worker& derived, const std::vector<core::Worker>& bound) {
  for (const auto& b : bound) {
    if (b.rank == derived.rank) return b;
  }
  return derived;
}

std::optional<std::string> dry_run_address_warning(const core::Resolved& r) {
  if (r.local_addr.empty()) return std::nullopt;  // no address chosen here (or a batch script's shell)
  std::vector<core::AdvertisedNode> nodes;
  nodes.reserve(r.nodes.size());
  for (const auto& n : r.nodes)
    nodes.push_back({n.host.value_or(""), n.node_rank == r.job.node_rank ? r.local_addr : std::string()});
  return core::advertised_address_warning(nodes, r.addr_option);
}

core::PlanTable dry_run_table(const core::Resolved& r) {
  return core::make_plan_table(r.job, r.nodes);
}

BoundNode bind_this_node(const core::Resolved& r, const core::PlanTable& t, const core::Topology& topo,
                         const std::set<int>& allowed) {
  BoundNode out;
  if (r.cpu_bind == core::CpuBind::none || r.context == core::SlurmContext::batch) return out;
  const auto slot = core::task_slot(r.job);
  for (auto& w : core::derive_workers(t, r.job.node_rank, slot)) {
    if (!slot || w.rank == slot->rank) out.workers.push_back(std::move(w));
  }
  out.warning = core::bind_local_workers(r.cpu_bind, topo, allowed, r.job.user_omp_num_threads.has_value(),
                                         out.workers);
  return out;
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

std::string render_startup_table(const core::PlanTable& t, int attempt, std::size_t max_rows) {
  struct Row {
    std::size_t node;
    std::string host, addr, ranks;
  };
  std::vector<Row> rows;
  // The address column only when a node advertises one other than its name (--rdzv-iface, --local-addr).
  bool addresses = false;
  for (std::size_t n = 0; n < t.nodes.size(); ++n) {
    const auto& row = t.nodes[n];
    addresses = addresses || (!row.addr.empty() && row.addr != row.host.value_or(""));
    rows.push_back({n, row.host.value_or("?"), row.addr.empty() ? std::string("?") : row.addr,
                    row.standby ? std::string("standby")
                                : rank_range(row.first_rank, row.first_rank + row.local_world_size - 1)});
  }
  std::size_t hw = 4, rw = 5, aw = 7;
  for (const auto& r : rows) {
    hw = std::max(hw, r.host.size());
    rw = std::max(rw, r.ranks.size());
    aw = std::max(aw, r.addr.size());
  }
  const auto host_cell = [&](const std::string& host, const std::string& addr) {
    return addresses ? fmt::format("{:<{}} {:<{}}", host, hw, addr, aw) : fmt::format("{:<{}}", host, hw);
  };
  const core::JobConstants& job = t.job;
  std::string out =
      fmt::format("ddprun: {}attempt {}: {} node{}, world size {}, master {}\n",
                  has_run_id(job) ? fmt::format("run {} ", job.run_id) : "", attempt, job.nnodes,
                  job.nnodes == 1 ? "" : "s", job.world_size, host_port(job.master_addr, job.master_port));
  if (const auto standbys = t.nodes.size() - static_cast<std::size_t>(job.nnodes); standbys > 0) {
    out.insert(out.size() - 1, fmt::format(", {} standby{}", standbys, standbys == 1 ? "" : "s"));
  }
  out += fmt::format("  {:<5} {} {:<{}} {}\n", "node", host_cell("host", "address"), "ranks", rw,
                     "gpus each rank sees (ranks:CUDA_VISIBLE_DEVICES)");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows.size() > max_rows && i == max_rows / 2) {
      out += fmt::format("  ... {} more nodes ...\n", rows.size() - max_rows);
      i = rows.size() - max_rows / 2 - 1;
      continue;
    }
    // Only the rows shown: GPU lists without the workers' environments. A standby runs none.
    const auto& row = t.nodes[rows[i].node];
    const std::string host = host_cell(rows[i].host, rows[i].addr);
    if (row.standby) {
      out += fmt::format("  {:<5} {} {:<{}} -\n", rows[i].node, host, rows[i].ranks, rw);
      continue;
    }
    std::vector<core::Worker> ws(static_cast<std::size_t>(row.local_world_size));
    for (int lr = 0; lr < row.local_world_size; ++lr) {
      ws[static_cast<std::size_t>(lr)].rank = row.first_rank + lr;
      ws[static_cast<std::size_t>(lr)].gpus = core::worker_gpus(job, row, lr);
    }
    out += fmt::format("  {:<5} {} {:<{}} {}\n", rows[i].node, host, rows[i].ranks, rw, gpus_seen(ws));
  }
  return out;
}

void write_plan_text(std::ostream& os, const core::Resolved& r, const core::PlanTable& t,
                     const std::vector<core::Worker>& this_node) {
  ChunkedOut out(os);
  out.buf += text_header(r, t.job);
  std::size_t host_w = 4;
  for (const auto& row : t.nodes) host_w = std::max(host_w, row.host ? row.host->size() : std::size_t{1});
  const bool mp = t.job.procs_per_replica > 1;
  const bool bind = r.cpu_bind != core::CpuBind::none;
  // A batch script or salloc shell is not one of the nodes that will run workers.
  const bool batch = r.context == core::SlurmContext::batch;
  out.buf += fmt::format("{:<5} {:<{}} {:>5} {:>6}  {:<12}{}{}\n", "node", "host", host_w, "rank", "local",
                         "gpus", mp ? "  mp/dp" : "", bind ? "  cpus" : "");
  const auto slot = core::task_slot(r.job);
  int max_local = -1;
  for (std::size_t n = 0; n < t.nodes.size(); ++n) {
    const bool mine = !batch && static_cast<int>(n) == r.job.node_rank;
    for (const auto& derived : core::derive_workers(t, static_cast<int>(n), slot)) {
      const core::Worker& w = mine ? bound_or(derived, this_node) : derived;
      max_local = std::max(max_local, w.local_rank);
      const std::string gpus = w.gpus.empty() ? "-" : fmt::format("{}", fmt::join(w.gpus, ","));
      const std::string mpdp =
          mp ? fmt::format("  {}/{}", w.env.at("DDPRUN_MP_RANK"), w.env.at("DDPRUN_DP_RANK")) : "";
      // Other nodes' CPUs are decided by their own agents: "?".
      const std::string cpus =
          bind ? fmt::format("  {:<12}", w.cpus.empty() ? "?" : core::format_cpu_list(w.cpus)) : "";
      fmt::format_to(std::back_inserter(out.buf), "{:<5} {:<{}} {:>5} {:>6}  {:<12}{}{}{}\n", w.node_rank,
                     w.host.value_or("?"), host_w, w.rank, w.local_rank, gpus, mpdp, cpus,
                     mine ? "  <- this node" : "");
    }
    if (t.nodes[n].standby) {  // a standby: no workers, no ranks until it takes a lost node's place
      fmt::format_to(std::back_inserter(out.buf), "{:<5} {:<{}} {:>5} {:>6}  standby{}\n", n,
                     t.nodes[n].host.value_or("?"), host_w, "-", "-", mine ? "  <- this node" : "");
    }
    out.maybe_flush();
  }
  if (r.command_spec.local_rank_arg == core::LocalRankArg::none) {
    out.buf += fmt::format("command: {}\n", joined(r.command));
    return;
  }
  // Workers differ only by their local rank: one line for each.
  for (int l = 0; l <= max_local; ++l) {
    out.buf += fmt::format("command (local rank {}): {}\n", l, joined(core::worker_argv(r.command_spec, l)));
  }
}

}  // namespace ddprun::launcher
