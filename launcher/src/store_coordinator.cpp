#include "store_coordinator.hpp"

#include <exception>
#include <utility>

namespace ddprun::launcher {

agent::PublishOutcome StoreCoordinator::publish_failure(const core::Failure& f,
                                                        std::chrono::milliseconds bound) {
  try {
    return {rz_.abort(f, bound), {}};
  } catch (const std::exception& e) {
    return {std::nullopt, e.what()};
  }
}

void StoreCoordinator::set_remote_abort_handler(agent::AbortHandler h) {
  install_abort_handler(
      mu_, handler_, watched_attempt_, rz_.attempt(), std::move(h),
      [this] { rz_.watch([this](const core::Failure& f) { on_abort(f); }); }, [] {});
}

void StoreCoordinator::on_abort(const core::Failure& f) {
  std::lock_guard lock(mu_);
  // The watch fires once an attempt: with the store's abort, or with node 0 it called lost.
  if (handler_) handler_(f, !rz_.node0_lost());
}

std::vector<agent::PeerRecord> StoreCoordinator::gather_results(std::chrono::milliseconds timeout,
                                                                std::optional<int> lost) {
  std::vector<agent::PeerRecord> out;
  for (auto& r : rz_.gather_results(timeout, lost))
    out.push_back({r.node_rank, r.hostname, std::move(r.record)});
  return out;
}

}  // namespace ddprun::launcher
