#pragma once
// Deadlines of the rendezvous's waits.
#include <chrono>

#include "store/store.hpp"

namespace ddprun::rdzv::detail {

using Clock = std::chrono::steady_clock;

// What is left until `deadline`, never negative.
inline Millis left_until(Clock::time_point deadline) {
  const auto d = std::chrono::duration_cast<Millis>(deadline - Clock::now());
  return d.count() > 0 ? d : Millis{0};
}

inline double seconds(Millis m) {
  return static_cast<double>(m.count()) / 1000.0;
}

}  // namespace ddprun::rdzv::detail
