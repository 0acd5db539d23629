#include "checkpoint_grace.hpp"

#include <utility>

#include "agent/policy.hpp"

namespace ddprun::agent {

CheckpointGrace::CheckpointGrace(boost::asio::io_context& io, std::chrono::milliseconds grace)
    : grace_(grace), timer_(io) {}

void CheckpointGrace::forwarded(int sig) {
  sig_ = sig;
  until_ = Clock::now() + grace_;
}

std::chrono::milliseconds CheckpointGrace::left() const {
  const auto now = Clock::now();
  if (sig_ == 0 || now >= until_) return std::chrono::milliseconds(0);
  // Rounded up, so a grace that still runs never reads as over.
  return std::chrono::ceil<std::chrono::milliseconds>(until_ - now);
}

int CheckpointGrace::signal() const {
  return left().count() > 0 ? sig_ : 0;
}

void CheckpointGrace::after_failure(bool after_signal, std::function<void()> stop) {
  const auto delay = teardown_delay(left(), after_signal, grace_);
  if (delay.count() == 0) {
    cancel();
    stop();
    return;
  }
  const auto at = Clock::now() + delay;
  if (stop_ && stop_at_ <= at) return;
  arm(at, std::move(stop));
}

void CheckpointGrace::when_over(std::function<void()> done) {
  if (left().count() == 0) {
    cancel();
    done();
    return;
  }
  arm(until_, std::move(done));
}

void CheckpointGrace::arm(Clock::time_point at, std::function<void()> run) {
  stop_ = std::move(run);
  stop_at_ = at;
  timer_.expires_at(at);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || !stop_) return;
    auto due = std::exchange(stop_, nullptr);
    due();
  });
}

void CheckpointGrace::cancel() {
  stop_ = nullptr;
  timer_.cancel();
}

}  // namespace ddprun::agent
