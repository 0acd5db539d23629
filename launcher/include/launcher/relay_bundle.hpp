#pragma once
// Per-task mode: the bundle a node's relay sends node 0 at the end of a run, its node's end-of-run
// records in local order (see docs/rendezvous.md, "Per-task mode"). Pure, binary-safe: records are
// copied, never re-encoded.
#include <optional>
#include <string>
#include <vector>

#include "agent/coordinator.hpp"
#include "rendezvous/rendezvous.hpp"

namespace ddprun::launcher {

// nullopt: that task's record did not come in time.
std::string encode_bundle(const std::vector<std::optional<std::string>>& records);
// Throws store::Error (protocol) on a malformed bundle.
std::vector<std::optional<std::string>> decode_bundle(const std::string& bundle);
// Node 0's per-task view from the per-node bundles (index = node): one record per task of
// node_ranks[node], in plan-rank order; a node whose bundle is missing or garbled gives nullopt records.
std::vector<agent::PeerRecord> unpack_bundles(const std::vector<rdzv::ResultRecord>& nodes,
                                              const std::vector<std::vector<int>>& node_ranks);

}  // namespace ddprun::launcher
