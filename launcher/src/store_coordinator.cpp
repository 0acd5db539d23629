#include "store_coordinator.hpp"

#include <utility>

namespace ddprun::launcher {

void StoreCoordinator::set_remote_abort_handler(std::function<void(const core::Failure&)> h) {
  {
    std::lock_guard lock(mu_);
    handler_ = std::move(h);
    if (!handler_ || watched_attempt_ == rz_.attempt()) return;
    watched_attempt_ = rz_.attempt();
  }
  try {
    rz_.watch([this](const core::Failure& f) { on_abort(f); });
  } catch (...) {
    std::lock_guard lock(mu_);
    handler_ = nullptr;  // the supervisor that installed it is going away
    watched_attempt_ = -1;
    throw;
  }
}

void StoreCoordinator::on_abort(const core::Failure& f) {
  std::lock_guard lock(mu_);
  if (handler_) handler_(f);
}

std::vector<agent::PeerRecord> StoreCoordinator::gather_results(std::chrono::milliseconds timeout,
                                                                std::optional<int> lost) {
  std::vector<agent::PeerRecord> out;
  for (auto& r : rz_.gather_results(timeout, lost))
    out.push_back({r.node_rank, r.hostname, std::move(r.record)});
  return out;
}

}  // namespace ddprun::launcher
