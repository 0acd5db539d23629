#include "core/worker_store.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace ddprun::core {

const char* to_string(WorkerStore s) {
  return name_of(kWorkerStoreNames, s, "agent");
}

std::optional<WorkerStore> parse_worker_store(std::string_view s) {
  return value_of(kWorkerStoreNames, s);
}

std::uint16_t relay_port(const std::string& run_id, int node, std::uint16_t master_port) {
  // FNV-1a, as derive_ports and node_store_port: stable across builds and machines.
  std::uint64_t h = 1469598103934665603ULL;
  for (char c : fmt::format("{}/worker-relay/{}", run_id, node)) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  constexpr std::uint64_t kFirst = 20000;
  constexpr std::uint64_t kSlots = 32767 - kFirst + 1;
  for (std::uint64_t i = 0;; ++i) {
    const auto port = static_cast<std::uint16_t>(kFirst + (h + i) % kSlots);
    if (port != master_port) return port;
  }
}

bool is_loopback(std::string_view a) {
  return a.starts_with("127.") || a == "::1";
}

std::vector<std::string> worker_store_hosts(const std::vector<std::string>& resolved,
                                            const std::vector<std::string>& local, bool several_nodes) {
  std::vector<std::string> out;
  for (const auto& a : resolved) {
    const bool mine = is_loopback(a) || std::find(local.begin(), local.end(), a) != local.end();
    if (mine && std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
  }
  const bool reachable =
      std::any_of(out.begin(), out.end(), [](const std::string& a) { return !is_loopback(a); });
  if (out.empty() || (several_nodes && !reachable)) return {"0.0.0.0"};
  return out;
}

}  // namespace ddprun::core
