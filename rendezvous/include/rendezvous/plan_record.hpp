#pragma once
// The record node 0 publishes under /attempt_<n>/plan (docs/protocol.md, "The plan"): the
// opaque plan plus who is in the round. Pure; O(nodes) in, and a few bytes for a uniform cluster
// on the wire: node ranks travel as runs, host names as a Slurm hostlist.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::rdzv {

struct PlanRecord {
  std::string plan;  // opaque here
  // The node ranks that joined, in the round's node order (ascending unless --rank-order topology
  // reordered them; each once); index = rank in the plan.
  std::vector<int> node_ranks;
  std::vector<std::string> hosts;  // by rank in the plan
  std::size_t active = 0;          // the first `active` run workers; the rest are standbys
  bool operator==(const PlanRecord&) const = default;
};

std::string encode_plan_record(const PlanRecord& r);

// Throws rdzv::Error (protocol) naming what is malformed.
PlanRecord decode_plan_record(std::string_view bytes);

}  // namespace ddprun::rdzv
