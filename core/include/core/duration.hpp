#pragma once
// Durations as users read them: seconds with a fraction, for messages and JSON fields.
#include <chrono>

namespace ddprun::core {

inline double seconds(std::chrono::milliseconds d) {
  return static_cast<double>(d.count()) / 1000.0;
}

}  // namespace ddprun::core
