#include "core/derived_port.hpp"

#include <algorithm>

namespace ddprun::core {

std::uint64_t port_hash(std::string_view text) {
  std::uint64_t h = 1469598103934665603ULL;
  for (const char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  return h;
}

std::uint16_t derived_port(std::string_view text, std::initializer_list<std::uint16_t> taken) {
  constexpr std::uint64_t kFirst = 20000;
  constexpr std::uint64_t kSlots = 32767 - kFirst + 1;
  const std::uint64_t h = port_hash(text);
  // At most taken.size() + 1 tries: the range has far more ports than anyone takes.
  for (std::uint64_t i = 0;; ++i) {
    const auto port = static_cast<std::uint16_t>(kFirst + (h + i) % kSlots);
    if (std::find(taken.begin(), taken.end(), port) == taken.end()) return port;
  }
}

}  // namespace ddprun::core
