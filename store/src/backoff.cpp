#include "store/backoff.hpp"

#include <algorithm>
#include <functional>
#include <thread>

namespace ddprun::store {

Backoff::Backoff(std::chrono::milliseconds initial, std::chrono::milliseconds max, std::uint32_t seed)
    : interval_(initial), max_(max), rng_(seed) {}

Backoff::Duration Backoff::next() {
  const auto delay = std::chrono::duration_cast<Duration>(
      std::chrono::duration<double, std::milli>(static_cast<double>(interval_.count()) * jitter_(rng_)));
  interval_ = std::min(interval_ * 2, max_);
  return delay;
}

std::uint32_t Backoff::cheap_seed() {
  return static_cast<std::uint32_t>(
      std::hash<std::thread::id>{}(std::this_thread::get_id()) ^
      static_cast<std::size_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
}

}  // namespace ddprun::store
