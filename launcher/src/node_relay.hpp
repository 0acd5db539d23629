#pragma once
// Per-task mode's coordinator (docs/rendezvous.md, "Per-task mode"). Private to the launcher.
//
// Local task 0 of each node (the relay) holds the node's one agent place in the job's rendezvous
// (`up`) and serves a node-local store on 127.0.0.1 (`down`) that the node's other tasks (members)
// join instead of node 0's. The relay passes aborts both ways (a local failure goes up, the
// job's root cause comes down), holds the node's exit barrier until every local task arrived, and
// sends its node's end-of-run records up as one bundle. A node with one task has no `down`.
//
// Besides the rendezvous keys, the node-local store holds a few of the relay's own, under
// "/pertask/attempt_<n>/": "root" (the job's root cause as node 0 decided it) and "exit/<local>"
// (that local task reached the exit barrier).
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "agent/coordinator.hpp"
#include "core/failure.hpp"
#include "launcher/relay_bundle.hpp"
#include "rendezvous/rendezvous.hpp"

namespace ddprun::store {
class TcpStore;
}

namespace ddprun::launcher {

struct RelaySetup {
  rdzv::Rendezvous* up = nullptr;    // the relay's place in the job (null on a member)
  rdzv::Rendezvous* down = nullptr;  // the node-local rendezvous (null when alone on the node)
  int local = 0;                     // SLURM_LOCALID
  int local_tasks = 1;
  // Connects a short extra client to the node-local store (its own keys, above).
  std::function<std::shared_ptr<store::TcpStore>()> connect_local;
  // Node 0: the plan ranks of each node's tasks, in local order (to unpack the bundles).
  std::vector<std::vector<int>> node_ranks;
};

class PerTaskCoordinator final : public agent::Coordinator {
 public:
  explicit PerTaskCoordinator(RelaySetup s) : s_(std::move(s)) {}

  agent::PublishOutcome publish_failure(const core::Failure& f, std::chrono::milliseconds bound) override;
  void set_remote_abort_handler(agent::AbortHandler h) override;
  agent::BarrierOutcome exit_barrier() override;
  bool publish_result(const std::string& record) override;
  std::vector<agent::PeerRecord> gather_results(std::chrono::milliseconds timeout,
                                                std::optional<int> lost) override;
  // Before the rendezvous go: from now on the watches' callbacks do nothing (they use both
  // rendezvous, so neither may go while one runs). Waits for one that is running.
  void close();

 private:
  bool relay() const { return s_.up != nullptr; }
  int attempt() const { return relay() ? s_.up->attempt() : s_.down->attempt(); }
  std::string key(const std::string& name) const;
  void on_up(const core::Failure& root);
  void on_down(const core::Failure& local);
  void tell_node(const core::Failure& root);
  void deliver(const core::Failure& root, bool from_store);
  core::Failure job_root_or(const core::Failure& local, std::chrono::milliseconds wait);
  agent::BarrierOutcome wait_local_arrivals();

  RelaySetup s_;
  std::mutex life_mu_;  // held by a running watch callback; close() takes it
  bool closed_ = false;
  std::mutex mu_;
  agent::AbortHandler handler_;
  int watched_attempt_ = -1;
  bool delivered_ = false;  // one root cause per attempt reaches the supervisor
};

}  // namespace ddprun::launcher
