#pragma once
// Retry delays: exponential with jitter, like PyTorch c10d's ExponentialBackoffWithJitter.
// Each delay is the current interval times a random factor in [0.5, 1.5); the interval then
// doubles, up to `max`. The jitter keeps 1000s of agents retrying at once from staying in step.
#include <chrono>
#include <cstdint>
#include <random>

namespace ddprun::store {

class Backoff {
 public:
  using Duration = std::chrono::steady_clock::duration;

  // `seed` picks the jitter sequence; a fixed seed gives a fixed sequence (tests).
  Backoff(std::chrono::milliseconds initial, std::chrono::milliseconds max, std::uint32_t seed);

  // The delay before the next retry; advances the interval.
  Duration next();

  // A seed that differs between threads and moments, without the syscall std::random_device costs
  // (visible in profiles of 1000s of clients).
  static std::uint32_t cheap_seed();

 private:
  std::chrono::milliseconds interval_;
  std::chrono::milliseconds max_;
  std::minstd_rand rng_;
  std::uniform_real_distribution<double> jitter_{0.5, 1.5};
};

}  // namespace ddprun::store
