// Agent mode: one agent per node, every agent a participant of node 0's round; elastic jobs
// (docs/elastic.md) go on without a lost node, promote a standby, or move the store to a survivor.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <atomic>
#include <memory>

#include "agent/signals.hpp"
#include "core/advertised.hpp"
#include "core/elastic.hpp"
#include "core/error.hpp"
#include "core/node_count.hpp"
#include "core/rank_order.hpp"
#include "core/status.hpp"
#include "launcher/health_check.hpp"
#include "launcher/observe/metrics_server.hpp"
#include "launcher/system.hpp"
#include "membership_report.hpp"
#include "session.hpp"
#include "session_common.hpp"
#include "store_coordinator.hpp"
#include "worker_store.hpp"

namespace ddprun::launcher {

namespace {

// The plan's nodes from the joined agents (sorted by node rank), renumbered 0..n-1. A node that sees
// the same GPUs as the one before shares its list (most do).
std::vector<core::NodeSpec> nodes_from_joined(const std::vector<rdzv::JoinInfo>& joined) {
  std::vector<core::NodeSpec> nodes;
  nodes.reserve(joined.size());
  for (std::size_t i = 0; i < joined.size(); ++i) {
    core::NodeSpec n;
    n.node_rank = static_cast<int>(i);
    if (!joined[i].hostname.empty()) n.host = joined[i].hostname;
    n.local_world_size = joined[i].local_world_size;
    n.gpus = i > 0 && nodes.back().gpus == joined[i].gpus ? nodes.back().gpus : core::GpuList(joined[i].gpus);
    n.addr = joined[i].addr;
    n.standby = joined[i].standby;
    nodes.push_back(std::move(n));
  }
  return nodes;
}

// The node ranks (in the round that ended) an attempt's root cause says are gone.
std::vector<int> lost_ranks(const std::optional<core::Failure>& root) {
  if (!root || !root->lost) return {};
  return {root->node_rank};
}

class RendezvousSession final : public Session {
 public:
  RendezvousSession(const core::Options& o, const core::Resolved& r, store::auth::Config auth,
                    agent::Events& ev)
      : r_(r),
        ev_(ev),
        quiet_(o.quiet),
        rz_(agent_rdzv_options(o, r, std::move(auth), ev)),
        coord_(rz_),
        store_(worker_store_log(ev), r.legacy_clients_21) {
    me_.node_rank = r.job.node_rank;
    me_.hostname = r.self.host.value_or("localhost");
    // Where the others and the workers reach this node: --rdzv-iface's or --local-addr's address, else
    // its name. The master's, in the plan, is MASTER_ADDR and where a failover's store goes.
    me_.addr = r.local_addr.empty() ? me_.hostname : r.local_addr;
    me_.local_world_size = r.self.local_world_size;
    me_.gpus = r.self.gpus;
    // Cut past the longest address taken (O(1) bytes a node); the cut one then reads as malformed.
    me_.topology = r.topology_addr.substr(0, core::kMaxTopologyAddr + 1);
    if (r.rdzv_port == 0) announce_store();
    // Node 0's agent serves the whole job's metrics; with --metrics-all-nodes every agent its own.
    if (o.metrics_port && (rz_.serving() || o.metrics_all_nodes)) {
      try {
        metrics_ =
            std::make_unique<MetricsServer>("", static_cast<std::uint16_t>(*o.metrics_port),
                                            [this, own = !rz_.serving()] { return metrics_source(own); });
      } catch (const core::Error& e) {
        // As any start-up error: every node ends with it, none waits for this one.
        core::Failure f;
        f.host = me_.hostname;
        f.node_rank = r.job.node_rank;
        f.exit_code = e.exit_code();
        f.reason = e.what();
        f.fatal = true;
        try {
          rz_.fail_start(f);
        } catch (const std::exception&) {
          // The others cannot be told; this node's line is printed all the same.
        }
        throw;
      }
    }
  }

  ~RendezvousSession() override {
    // The job ends here, its store with it: a `ddprun top` watching learns it finished, not that node 0
    // was lost (docs/observe.md).
    if (rz_.serving()) rz_.try_write(core::kJobEndKey, "1", {});
  }
  RendezvousSession(const RendezvousSession&) = delete;
  RendezvousSession& operator=(const RendezvousSession&) = delete;

  Round join(int attempt) override {
    // Node 0 publishes the constants and the node table (O(nodes) bytes, docs/protocol.md);
    // every agent derives its own node's workers from them.
    rdzv::Joined joined;
    try {
      joined = rz_.join(me_, [&](const std::vector<rdzv::JoinInfo>& nodes) {
        return core::encode_plan_table(node0_table(nodes, attempt));
      });
    } catch (const store::Error& e) {
      // Another agent could not start: its error, and its exit code, on every node.
      if (const auto& f = rz_.start_failure()) throw core::Error(e.what(), f->exit_code);
      throw;
    }
    Round round;
    if (joined.ended) {
      round.ended = joined.ended;
      return round;
    }
    round.attempt = joined.attempt;
    node_rank_ = joined.node_rank;
    round.table = std::make_shared<const core::PlanTable>(parse_published_plan(joined.plan, rz_.endpoint()));
    joined.plan = std::string();
    round.local = core::derive_workers(*round.table, joined.node_rank);
    round.announce = joined.node_rank == 0;
    round.standby = round.table->nodes.at(static_cast<std::size_t>(joined.node_rank)).standby;
    round.store_endpoint = rz_.endpoint();
    round.store_run_id = r_.rdzv_run_id.empty() ? r_.job.run_id : r_.rdzv_run_id;
    // --worker-store relay: this node's workers reach node 0's store through a relay of this attempt.
    store_.relay(round.table->job, joined.node_rank, round.local);
    // An elastic job's first round may close without a node of the step (one that failed its health
    // check exits without joining): node rank 0 says which, since nothing else would.
    if (attempt == 0 && round.announce && r_.elastic && r_.context == core::SlurmContext::step) {
      std::vector<int> in;
      for (const auto& m : joined.members) in.push_back(m.orig_rank);
      if (const auto line = left_out_line(r_.nagents, in, rz_.expected_hosts())) ev_.warn(*line);
    }
    if (round.announce) warn_addresses(*round.table);
    if (joined.attempt > 0 && round.announce && last_table_) {
      report_membership(ev_, quiet_, joined.attempt, rz_.previous_members(), rz_.members(),
                        last_table_->job.world_size, round.table->job.world_size);
    }
    last_table_ = round.table;
    return round;
  }
  agent::Coordinator& coordinator() override { return coord_; }
  void fail_start(const core::Failure& cause) override {
    // This agent leaves with its own code, which srun's SIGTERM (sent once an agent exits) must not change.
    agent::hold_stop_signals();
    try {
      // An elastic job goes on without it (a standby takes its place), unless it serves the store.
      if (r_.job.max_restarts > 0 && !rz_.serving()) {
        rz_.decline(cause);
      } else {
        rz_.fail_start(cause);
      }
    } catch (const std::exception&) {
      // The others cannot be told (the store is gone): they end at their round's timeout.
    }
  }
  bool checks_first_round() const override { return true; }
  void before_check(int attempt) override {
    if (attempt == 0) rz_.wait_beside_check();
  }
  bool check_interrupted() override { return rz_.interrupted(); }
  void finish(int code) override { rz_.finish(code); }
  std::optional<core::Failure> standby(const std::function<bool()>& stop) override {
    return rz_.standby(stop);
  }

  std::optional<CutOff> after_cut_off() override {
    const auto gap = rz_.cut_off();
    if (!gap) return std::nullopt;
    const bool node0 = rz_.serving();
    const std::string line = fmt::format(
        "this node (node rank {}, {}) did not run for {:.1f} s (stopped, or starved), longer than the others "
        "wait before they declare it lost ({}): it was cut off, and the job {} without it; its workers here "
        "were stopped",
        r_.job.node_rank, me_.hostname, std::chrono::duration<double>(*gap).count(),
        node0 ? "the node-0 timeout" : "the heartbeat timeout",
        r_.job.max_restarts > 0 ? "went on" : "ended (no --max-restarts)");
    CutOff c;
    if (r_.job.max_restarts == 0) {
      error_line(line);
      return c;
    }
    ev_.warn(line);
    // Where the job went on: node 0's successor serves a fresh store (as every survivor computed it);
    // any other node's job is still at its node 0.
    std::string addr;
    int port = rz_.port();
    if (node0) {
      const auto host = core::failover_host(rz_.members(), {0});
      if (!host || !last_table_) return unknown_outcome(c, "no other node was in its round");
      const auto& row = last_table_->nodes.at(static_cast<std::size_t>(*host));
      addr = row.addr.empty() ? row.host.value_or("localhost") : row.addr;
      port = core::failover_port(r_.rdzv_port != 0 ? r_.rdzv_port : rz_.port(), rz_.failovers() + 1,
                                 last_table_->job.master_port);
    }
    const std::string where = addr.empty() ? rz_.endpoint() : fmt::format("{}:{}", addr, port);
    if (rz_.follow(addr, static_cast<std::uint16_t>(port))) {
      ev_.warn(fmt::format("it follows the job at {} as a standby, for a lost node's place or the job's end",
                           where));
      c.follow = true;
      return c;
    }
    if (const auto code = rz_.outcome_left_here()) {
      ev_.warn(fmt::format("the job ended with exit code {} while this node was cut off; it leaves with it",
                           *code));
      c.exit_code = *code;
      return c;
    }
    return unknown_outcome(c,
                           fmt::format("nothing of this job answers at {}, where it went on: it has ended, "
                                       "or its store host is gone too",
                                       where));
  }

  std::optional<std::string> prepare_restart(const std::optional<core::Failure>& root,
                                             bool restart_due) override {
    const auto lost = lost_ranks(root);
    if (lost.empty()) return std::nullopt;
    // Any job with restarts goes on without a lost node when enough are left, standbys included: those
    // of the round and those that came late, which only the next round's node 0 knows.
    return core::loss_ends_job(rz_.members(), lost, r_.nnodes_min, r_.job.max_restarts > 0, restart_due);
  }

  void next_attempt(const std::optional<core::Failure>& root) override {
    // The rendezvous keeps the round that ended and who of it is gone; asked below and at the next join.
    rz_.next_attempt(lost_ranks(root));
    const auto& lost = rz_.previous_lost();
    // Node 0 is gone: the first survivor serves a fresh store on the next port.
    if (std::find(lost.begin(), lost.end(), 0) == lost.end()) return;
    const auto host = core::failover_host(rz_.previous_members(), lost);
    if (!host) return;
    const auto& row = last_table_->nodes.at(static_cast<std::size_t>(*host));
    const int port = core::failover_port(r_.rdzv_port, rz_.failovers() + 1, last_table_->job.master_port);
    const std::string addr = row.addr.empty() ? row.host.value_or("localhost") : row.addr;
    rz_.fail_over(*host, addr, static_cast<std::uint16_t>(port));
    announce_moved_store(addr, port);
  }

 private:
  // The records --metrics-port shows, read without waiting (the metrics thread): on the store's host
  // every node's, elsewhere this node's own.
  std::vector<core::NodeStatus> metrics_source(bool own_only) {
    std::vector<core::NodeStatus> out;
    const auto read = [&](int node) {
      if (const auto rec = rz_.local_status(core::status_key(node))) {
        try {
          out.push_back(core::decode_node_status(*rec));
        } catch (const core::Error&) {
          // A malformed record: that node has no series this time.
        }
      }
    };
    if (own_only) {
      if (const int me = node_rank_.load(); me >= 0) read(me);
      return out;
    }
    read(0);
    const int nnodes = out.empty() ? 0 : out.front().nnodes;
    for (int n = 1; n < nnodes; ++n) read(n);
    return out;
  }

  CutOff unknown_outcome(CutOff c, const std::string& why) {
    error_line(fmt::format(
        "{}; this node cannot tell the job's outcome and exits 1: the other nodes' exit codes and the last "
        "node 0's `attempts:` line tell it (docs/elastic.md, \"A node cut off\")",
        why));
    c.exit_code = 1;
    return c;
  }
  void error_line(const std::string& what) {
    if (ev_.json()) {
      ev_.emit("error", {{"message", what}, {"exit_code", 1}});
    } else {
      fmt::print(stderr, "ddprun: error: {}\n", what);
    }
  }

  // After a node-0 failover, every survivor says where the store went: `ddprun top` and `stacks` look
  // there (docs/observe.md), and a user who gave --rdzv-endpoint needs the new one.
  void announce_moved_store(const std::string& addr, int port) {
    const std::string endpoint = addr.find(':') != std::string::npos ? fmt::format("[{}]:{}", addr, port)
                                                                     : fmt::format("{}:{}", addr, port);
    const std::string message = fmt::format(
        "node 0 was lost: the rendezvous store moved to {} (where ddprun top and ddprun stacks find it)",
        endpoint);
    if (ev_.json()) {
      ev_.emit("store_moved", {{"endpoint", endpoint}, {"message", message}});
    } else {
      fmt::print(stderr, "ddprun: {}\n", message);
    }
  }

  // --rdzv-endpoint HOST:0 (only node 0, core::resolve): the port the store got, which the other
  // agents need, so said even under --quiet.
  void announce_store() {
    const bool v6 = r_.rdzv_host.find(':') != std::string::npos;
    const std::string endpoint = v6 ? fmt::format("[{}]:{}", r_.rdzv_host, rz_.port())
                                    : fmt::format("{}:{}", r_.rdzv_host, rz_.port());
    const std::string message =
        fmt::format("rendezvous store listening on {}; start the other agents with --rdzv-endpoint {}",
                    endpoint, endpoint);
    if (ev_.json()) {
      ev_.emit("rendezvous_listening", {{"endpoint", endpoint}, {"port", rz_.port()}, {"message", message}});
    } else {
      fmt::print(stderr, "ddprun: {}\n", message);
    }
  }

  // On the master: the table from the nodes that joined, with MASTER_PORT: served here for the attempt
  // (the workers' store, --worker-store agent|relay), or checked by binding it for worker rank 0's own;
  // never the rendezvous store's port.
  core::PlanTable node0_table(const std::vector<rdzv::JoinInfo>& nodes, int attempt) {
    core::JobSpec job = r_.job;
    job.restart_count = attempt;
    job.nnodes = static_cast<int>(
        std::count_if(nodes.begin(), nodes.end(), [](const rdzv::JoinInfo& n) { return !n.standby; }));
    job.node_rank = 0;
    // After a failover this agent hosts the store, and worker rank 0 runs here.
    if (rz_.failovers() > 0) job.master_addr = me_.addr;
    if (r_.rank_order == core::RankOrder::topology) report_order(nodes, attempt);
    core::PlanTable table = core::make_plan_table(job, nodes_from_joined(nodes));
    table.job.master_port = store_.master_port(table.job, rz_.port(), r_.master_port_given, nodes.size() > 1,
                                               worker_store_peers(nodes, rz_.peer_hosts()));
    return table;
  }

  // Nodes of different host names that advertise one address, or a loopback one: node 0 says so, once
  // for each different line (a later round may change the nodes).
  void warn_addresses(const core::PlanTable& table) {
    std::vector<core::AdvertisedNode> nodes;
    nodes.reserve(table.nodes.size());
    for (const auto& row : table.nodes) nodes.push_back({row.host.value_or(""), row.addr});
    auto line = core::advertised_address_warning(
        nodes,
        r_.addr_option.empty() ? std::string("the nodes' --rdzv-iface or --local-addr") : r_.addr_option);
    if (!line || *line == address_warning_) return;
    address_warning_ = std::move(*line);
    ev_.warn(address_warning_);
  }

  // --rank-order topology: node 0 says which node ranks share which switch or block, and why a node is
  // where it is (no address, a malformed one), once per round.
  void report_order(const std::vector<rdzv::JoinInfo>& nodes, int attempt) {
    std::vector<core::OrderedNode> order;
    std::vector<std::string> hosts;
    std::vector<std::string> standbys;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      hosts.push_back(nodes[i].hostname);
      if (nodes[i].standby) {
        standbys.push_back(nodes[i].hostname);
      } else {
        order.push_back({i, core::topology_group(nodes[i].topology)});
      }
    }
    std::vector<std::string> lines = core::describe_order(order, hosts);
    if (!standbys.empty()) {
      lines.push_back(fmt::format("{}: standby{}, in node-rank order ({})",
                                  core::node_rank_range(order.size(), nodes.size() - 1),
                                  standbys.size() == 1 ? "" : "s", fmt::join(standbys, ",")));
    }
    if (ev_.json()) {
      ev_.emit("rank_order", {{"attempt", attempt}, {"order", "topology"}, {"groups", lines}});
    } else if (!quiet_) {
      for (const auto& line : lines) fmt::print(stderr, "ddprun: --rank-order topology: {}\n", line);
    }
  }

  const core::Resolved& r_;
  agent::Events& ev_;
  bool quiet_;
  rdzv::JoinInfo me_;
  rdzv::Rendezvous rz_;
  StoreCoordinator coord_;
  // The last round's plan, for the next one (elastic); its members are the rendezvous's.
  std::shared_ptr<const core::PlanTable> last_table_;
  WorkerStoreHost store_;                   // the workers' store, while this agent is node 0
  std::atomic<int> node_rank_{-1};          // this agent's in the last round (the metrics thread reads it)
  std::string address_warning_;             // the last warn_addresses line
  std::unique_ptr<MetricsServer> metrics_;  // --metrics-port; declared last: stopped first
};

}  // namespace

rdzv::RendezvousOptions agent_rdzv_options(const core::Options& o, const core::Resolved& r,
                                           store::auth::Config auth, agent::Events& ev) {
  rdzv::RendezvousOptions ro = common_rdzv_options(o, r, std::move(auth), ev);
  ro.host = r.rdzv_host;
  ro.port = r.rdzv_port;
  ro.fallback_ports = r.rdzv_fallback_ports;
  ro.node_rank = r.job.node_rank;
  // An IPv6 address advertised: a store moved to it after a failover must listen on IPv6 too.
  if (r.local_addr.find(':') != std::string::npos) ro.listen_host = "::";
  ro.nnodes_min = r.nnodes_min;
  ro.nnodes_max = r.nnodes_max;
  // Any job with restarts admits standbys, late ones included, and goes on without a node that declines.
  ro.elastic = r.job.max_restarts > 0;
  ro.nagents = r.nagents;
  ro.agents_known = r.context == core::SlurmContext::step;  // the step's nodes are every agent there is
  ro.rank_order = r.rank_order;
  // Survivors are back once their teardown (the grace, then SIGKILL) and their health check are over.
  ro.rejoin_timeout = to_ms(o.term_timeout) + ro.heartbeat_timeout + std::chrono::milliseconds(10000) +
                      (o.health_check ? to_ms(o.health_check_timeout) : std::chrono::milliseconds(0));
  ro.on_waiting = [&ev, quiet = o.quiet](const std::string& m) {
    if (ev.json()) {
      ev.emit("rendezvous_waiting", {{"message", m}});
    } else if (!quiet) {
      fmt::print(stderr, "ddprun: {}\n", m);
    }
  };
  // Up to the last known host: an unknown one reads as a name past the list's end (outside Slurm only
  // this node's is known, and 16,384 empty names would be held for nothing).
  const auto known = std::find_if(r.nodes.rbegin(), r.nodes.rend(),
                                  [](const core::NodeSpec& n) { return n.host && !n.host->empty(); });
  for (auto n = r.nodes.begin(); n != known.base(); ++n) ro.expected_hosts.push_back(n->host.value_or(""));
  return ro;
}

std::unique_ptr<Session> make_rendezvous_session(const core::Options& o, const core::Resolved& r,
                                                 store::auth::Config auth, agent::Events& ev) {
  return std::make_unique<RendezvousSession>(o, r, std::move(auth), ev);
}

}  // namespace ddprun::launcher
