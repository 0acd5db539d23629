#pragma once
// Who serves the workers' store, the TCPStore of their init_process_group (docs/rendezvous.md, "The
// workers' store"). Pure decisions only; the serving is launcher/src/worker_store.*.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/enum_names.hpp"

namespace ddprun::core {

enum class WorkerStore {
  agent,  // node 0's agent serves it on MASTER_PORT for the whole attempt (the default)
  rank0,  // worker rank 0 hosts torch's own store on MASTER_PORT (ddprun before issue 26)
  relay,  // each node's agent serves its own workers on 127.0.0.1 and forwards to node 0's
};
inline constexpr std::array<EnumName<WorkerStore>, 3> kWorkerStoreNames{
    {{WorkerStore::agent, "agent"}, {WorkerStore::rank0, "rank0"}, {WorkerStore::relay, "relay"}}};
const char* to_string(WorkerStore s);
// "agent" | "rank0" | "relay"; nullopt for anything else.
std::optional<WorkerStore> parse_worker_store(std::string_view s);

// TORCHELASTIC_USE_AGENT_STORE as torch reads it (the exact strings "True" / "False").
inline const char* use_agent_store(WorkerStore s) {
  return s == WorkerStore::rank0 ? "False" : "True";
}

// The relay's port on node `node` (--worker-store relay): derived from the run id and the node as
// the per-task node store's (core/per_task.hpp), with its own tag, so nodes sharing one host differ
// and every node computes it without talking. Never MASTER_PORT. (A port that is busy when the relay
// starts is replaced by a free one for that node's workers: launcher/src/worker_store.cpp.)
std::uint16_t relay_port(const std::string& run_id, int node, std::uint16_t master_port);

// Where node 0 listens for the workers (numeric, normalized addresses in, as the launcher resolves
// MASTER_ADDR and lists this host's own): the addresses MASTER_ADDR resolves to that are this host's;
// the wildcard "0.0.0.0" when none is, or when a job of several nodes would be left with loopback
// only (a host name that /etc/hosts maps to 127.0.1.1 is reached by the other nodes at another
// address; the peer filter then keeps strangers out).
std::vector<std::string> worker_store_hosts(const std::vector<std::string>& resolved,
                                            const std::vector<std::string>& local, bool several_nodes);
bool is_loopback(std::string_view numeric);

}  // namespace ddprun::core
