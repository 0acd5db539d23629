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

// How both coordinators (this one and per-task mode's) take the supervisor's abort handler: keep it in
// `slot` under `mu`; with the first handler of a new `attempt`, run `new_attempt` under the lock, then
// `watch` (install the rendezvous watches that call the handler) outside it, since a watch may fire at
// once. When `watch` throws, the supervisor that set the handler is going away: forget it, rethrow.
template <class Watch, class NewAttempt>
void install_abort_handler(std::mutex& mu, agent::AbortHandler& slot, int& watched_attempt, int attempt,
                           agent::AbortHandler h, Watch&& watch, NewAttempt&& new_attempt) {
  {
    std::lock_guard lock(mu);
    slot = std::move(h);
    if (!slot || watched_attempt == attempt) return;
    watched_attempt = attempt;
    new_attempt();
  }
  try {
    watch();
  } catch (...) {
    std::lock_guard lock(mu);
    slot = nullptr;
    watched_attempt = -1;
    throw;
  }
}

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
  bool observed() const override { return true; }
  bool publish_status(int node_rank, const std::string& record) override {
    return rz_.try_write(core::status_key(node_rank), record, {.keep = true});
  }
  std::optional<std::string> stacks_request() override { return rz_.stacks_request(); }
  bool write_shared(const std::string& key, const std::string& value) override {
    return rz_.try_write(key, value, {.beside_barrier = true});
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
