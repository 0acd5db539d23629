#include "core/worker_store.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/derived_port.hpp"

namespace ddprun::core {

const char* to_string(WorkerStore s) {
  return name_of(kWorkerStoreNames, s, "agent");
}

std::optional<WorkerStore> parse_worker_store(std::string_view s) {
  return value_of(kWorkerStoreNames, s);
}

std::uint16_t relay_port(const std::string& run_id, int node, std::uint16_t master_port) {
  return derived_port(fmt::format("{}/worker-relay/{}", run_id, node), {master_port});
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
