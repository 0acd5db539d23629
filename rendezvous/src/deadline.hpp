#pragma once
// Deadlines of the rendezvous's waits.
#include <chrono>

#include "core/duration.hpp"

#include "store/store.hpp"
#include "store_names.hpp"

namespace ddprun::rdzv::detail {

using Clock = std::chrono::steady_clock;

// What is left until `deadline`, never negative.
inline Millis left_until(Clock::time_point deadline) {
  const auto d = std::chrono::duration_cast<Millis>(deadline - Clock::now());
  return d.count() > 0 ? d : Millis{0};
}

using core::seconds;

}  // namespace ddprun::rdzv::detail
