#pragma once
// The supervisor's view of the other nodes, over the rendezvous (the agent and per-task modes).
// Private to the launcher. The watch (heartbeats and the abort push) starts when the supervisor
// installs its handler, once per attempt, so an abort cannot arrive before someone listens: one
// published earlier is pushed at once by the new watch.
#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/coordinator.hpp"
#include "core/status.hpp"
#include "rendezvous/rendezvous.hpp"

namespace ddprun::launcher {

class StoreCoordinator final : public agent::Coordinator {
 public:
  explicit StoreCoordinator(rdzv::Rendezvous& rz) : rz_(rz) {}

  agent::PublishOutcome publish_failure(const core::Failure& f, std::chrono::milliseconds bound) override;
  void set_remote_abort_handler(agent::AbortHandler h) override;
  agent::BarrierOutcome exit_barrier() override {
    auto end = rz_.exit_barrier();
    return {std::move(end.root), end.from_store};
  }
  bool publish_result(const std::string& record) override { return rz_.publish_result(record); }
  bool publish_status(int node_rank, const std::string& record) override {
    return rz_.publish_status(core::status_key(node_rank), record);
  }
  std::optional<std::string> stacks_request() override { return rz_.stacks_request(); }
  bool write_shared(const std::string& key, const std::string& value) override {
    return rz_.write_shared(key, value);
  }
  std::vector<agent::PeerRecord> gather_results(std::chrono::milliseconds timeout,
                                                std::optional<int> lost) override;

 private:
  // From the watch thread. Under the lock: once the handler is reset, it is not running.
  void on_abort(const core::Failure& f);

  rdzv::Rendezvous& rz_;
  std::mutex mu_;
  agent::AbortHandler handler_;
  int watched_attempt_ = -1;
};

}  // namespace ddprun::launcher
