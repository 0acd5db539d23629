#include "per_task_session.hpp"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "agent/signals.hpp"
#include "core/error.hpp"
#include "core/json.hpp"
#include "core/per_task.hpp"
#include "core/status.hpp"
#include "launcher/system.hpp"
#include "node_relay.hpp"
#include "session_common.hpp"
#include "store/client.hpp"
#include "store/error.hpp"
#include "worker_store.hpp"

namespace ddprun::launcher {

namespace {

using std::chrono::milliseconds;

constexpr milliseconds kNodeJoinMargin{10000};

// The plan ranks of each node's tasks, in local order (Slurm fixed the layout), from the table: no
// worker environments are built for it.
std::vector<std::vector<int>> ranks_by_node(const core::PlanTable& table) {
  std::vector<std::vector<int>> out(table.nodes.size());
  for (std::size_t k = 0; k < table.nodes.size(); ++k) {
    const core::NodeRow& row = table.nodes[k];
    if (row.standby) continue;
    for (int lr = 0; lr < row.local_world_size; ++lr) out[k].push_back(row.first_rank + lr);
  }
  return out;
}

class PerTaskSession final : public Session {
 public:
  PerTaskSession(const core::Options& o, const core::Resolved& r, store::auth::Config auth,
                 agent::Events& ev);
  ~PerTaskSession() override {
    if (coord_) coord_->close();  // the watches call across both rendezvous: quiet them first
  }
  PerTaskSession(const PerTaskSession&) = delete;
  PerTaskSession& operator=(const PerTaskSession&) = delete;

  Round join(int attempt) override;
  agent::Coordinator& coordinator() override { return *coord_; }
  void next_attempt(const std::optional<core::Failure>&) override {
    if (up_) up_->next_attempt();
    if (down_) down_->next_attempt();
  }
  // The relay's start-up error (its node's failed --health-check, the only one run there): first to
  // its node's tasks, then to the job's other relays, which pass it down to theirs (join()).
  void fail_start(const core::Failure& cause) override {
    agent::hold_stop_signals();
    for (auto* rz : {down_.get(), up_.get()}) {
      if (!rz) continue;
      try {
        rz->fail_start(cause);
      } catch (const std::exception&) {
        // That store is out of reach: its side ends at its round's timeout.
      }
    }
  }

 private:
  rdzv::JoinInfo join_info(int node_rank, int local_world_size) const;
  std::string node0_plan(int attempt, const std::vector<rdzv::JoinInfo>& joined);
  void pass_down_join_error(const std::string& message);
  std::shared_ptr<store::TcpStore> connect_local() const;

  const core::Resolved& r_;
  core::TaskPlace place_;
  store::auth::Config auth_;
  std::string local_run_id_;
  std::uint16_t local_port_ = 0;
  // Declared first, so it outlives the rendezvous whose watch threads call it.
  std::unique_ptr<PerTaskCoordinator> coord_;
  std::unique_ptr<rdzv::Rendezvous> up_;    // relay: the node's place in the job
  std::unique_ptr<rdzv::Rendezvous> down_;  // the node-local store (served by the relay)
  WorkerStoreHost store_;                   // the workers' store, on node 0's relay
};

std::vector<int> tasks_per_node(const core::Resolved& r) {
  std::vector<int> tasks;
  for (const auto& n : r.nodes) tasks.push_back(n.local_world_size);
  return tasks;
}

PerTaskSession::PerTaskSession(const core::Options& o, const core::Resolved& r, store::auth::Config auth,
                               agent::Events& ev)
    : r_(r),
      place_(core::task_place(tasks_per_node(r), r.job.node_rank, r.job.task_local_rank.value_or(0))),
      auth_(std::move(auth)),
      local_run_id_(fmt::format("{}/node/{}", r.job.run_id, place_.node)),
      local_port_(core::node_store_port(r.job.run_id, place_.node, r.rdzv_port,
                                        static_cast<std::uint16_t>(r.job.master_port))),
      store_(worker_store_log(ev), r.legacy_clients_21) {
  if (place_.relay) {
    rdzv::RendezvousOptions ro = common_rdzv_options(o, r, auth_, ev);
    ro.host = r.rdzv_host;
    ro.port = r.rdzv_port;
    ro.fallback_ports = r.rdzv_fallback_ports;
    ro.node_rank = place_.node;
    ro.nnodes_min = ro.nnodes_max = static_cast<int>(r.nodes.size());
    for (const auto& n : r.nodes) ro.expected_hosts.push_back(n.host.value_or(""));
    up_ = std::make_unique<rdzv::Rendezvous>(std::move(ro));
  }
  if (place_.node_store) {
    rdzv::RendezvousOptions ro = common_rdzv_options(o, r, auth_, ev);
    ro.host = ro.listen_host = "127.0.0.1";
    ro.port = local_port_;
    ro.run_id = local_run_id_;
    ro.node_rank = place_.local;
    ro.nnodes_min = ro.nnodes_max = place_.local_tasks;
    // The node's round ends after the job's (the relay joins the job first): a failed job round
    // reaches the node's tasks before their own wait ends.
    ro.join_timeout += kNodeJoinMargin;
    ro.expected_hosts.assign(static_cast<std::size_t>(place_.local_tasks), r.self.host.value_or("localhost"));
    try {
      down_ = std::make_unique<rdzv::Rendezvous>(std::move(ro));
    } catch (const store::Error& e) {
      // The store's own advice (--rdzv-endpoint) is for the job's store, not this one: keep its cause only.
      std::string why = e.what();
      why.resize(std::min(why.size(), why.find("; ")));
      throw store::Error(
          e.kind(),
          fmt::format("per-task mode: {} (this node's local store, its port derived from the run "
                      "id '{}' and the node); another program holds the port: run the step "
                      "again, or give another --rdzv-id",
                      why, r.job.run_id),
          e.op(), e.endpoint());
    }
  }
  RelaySetup s;
  s.up = up_.get();
  s.down = down_.get();
  s.local = place_.local;
  s.local_tasks = place_.local_tasks;
  s.connect_local = [this] { return connect_local(); };
  s.node_ranks = ranks_by_node(core::make_plan_table(r.job, r.nodes));
  coord_ = std::make_unique<PerTaskCoordinator>(std::move(s));
}

rdzv::JoinInfo PerTaskSession::join_info(int node_rank, int local_world_size) const {
  rdzv::JoinInfo me;
  me.node_rank = node_rank;
  me.hostname = r_.self.host.value_or("localhost");
  me.addr = r_.local_addr.empty() ? me.hostname : r_.local_addr;  // --rdzv-iface, --local-addr
  me.local_world_size = local_world_size;
  me.gpus = r_.self.gpus;
  return me;
}

// On the master: Slurm fixed the layout; the round agrees on the attempt and MASTER_PORT: the
// workers' store served here for the attempt, or (--worker-store rank0) checked by binding it for
// worker rank 0's own; never one of the rendezvous stores.
std::string PerTaskSession::node0_plan(int attempt, const std::vector<rdzv::JoinInfo>& joined) {
  core::JobSpec job = r_.job;
  job.restart_count = attempt;
  core::PlanTable table = core::make_plan_table(job, r_.nodes);
  table.job.master_port =
      store_.master_port(table.job, up_->port(), r_.master_port_given, table.nodes.size() > 1,
                         worker_store_peers(joined, up_->peer_hosts()));
  return core::encode_plan_table(table);
}

Round PerTaskSession::join(int attempt) {
  std::string text;
  std::string from;
  if (up_) {
    try {
      text = up_->join(join_info(place_.node, place_.local_tasks),
                       [&](const std::vector<rdzv::JoinInfo>& joined) { return node0_plan(attempt, joined); })
                 .plan;
    } catch (const std::exception& e) {
      // Another node could not start: its cause, and its exit code, for this node's tasks too.
      if (const auto& f = up_->start_failure()) {
        if (down_) {
          try {
            down_->fail_start(*f);
          } catch (const std::exception&) {
          }
        }
        throw core::Error(e.what(), f->exit_code);
      }
      pass_down_join_error(e.what());
      throw;
    }
    from = up_->endpoint();
    // No status is published in this mode: `ddprun top` and `stacks` say so rather than "still joining".
    if (up_->serving()) {
      up_->write_shared(
          core::kNoStatusKey,
          "per-task mode (srun started several ddpruns per node, each one worker) publishes no "
          "status and answers no stacks; run one ddprun per node (srun --ntasks-per-node=1) with "
          "--nproc-per-node for them");
    }
  }
  if (down_) {
    // The relay publishes the job's plan to its node as it is; a member reads it here.
    try {
      text = down_->join(join_info(place_.local, 1), [&](const std::vector<rdzv::JoinInfo>&) { return text; })
                 .plan;
    } catch (const store::Error& e) {
      if (const auto& f = down_->start_failure()) throw core::Error(e.what(), f->exit_code);
      throw;
    }
    if (from.empty()) from = down_->endpoint();
  }
  Round round;
  round.table = std::make_shared<const core::PlanTable>(parse_published_plan(text, from));
  // This task's own worker, from its own view of Slurm (its GPUs may differ from task 0's), with
  // the agreed MASTER_PORT.
  core::JobSpec job = r_.job;
  job.restart_count = attempt;
  job.master_port = round.table->job.master_port;
  const auto slot = core::task_slot(job);
  for (auto& w : core::derive_workers(core::make_plan_table(job, r_.nodes), job.node_rank, slot)) {
    if (slot && w.local_rank == slot->local_rank) round.local.push_back(std::move(w));
  }
  round.announce = *r_.job.task_rank == 0;
  return round;
}

// The node's tasks fail with the relay's own message (a missing node, a busy port) rather than a
// timeout of their own: their round on the node-local store ends with it.
void PerTaskSession::pass_down_join_error(const std::string& message) {
  if (!down_) return;
  try {
    down_->join(join_info(place_.local, 1), [&](const std::vector<rdzv::JoinInfo>&) -> std::string {
      throw rdzv::Error(message, "join");
    });
  } catch (const std::exception&) {
    // Expected: the round failed with our message.
  }
}

std::shared_ptr<store::TcpStore> PerTaskSession::connect_local() const {
  store::ClientOptions co;
  co.host = "127.0.0.1";
  co.port = local_port_;
  co.run_id = local_run_id_;
  co.auth = auth_;
  co.label = fmt::format("pertask/{}", place_.local);
  co.connect_timeout = milliseconds{2000};
  co.op_timeout = milliseconds{2000};
  return std::make_shared<store::TcpStore>(std::move(co));
}

}  // namespace

std::unique_ptr<Session> make_per_task_session(const core::Options& o, const core::Resolved& r,
                                               store::auth::Config auth, agent::Events& ev) {
  return std::make_unique<PerTaskSession>(o, r, std::move(auth), ev);
}

}  // namespace ddprun::launcher
