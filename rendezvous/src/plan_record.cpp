// The published plan record: {"plan": "...", "ranks": [[first, last], ...], "hostlist": "n[1-4]",
// "active": N}. "hosts": [...] replaces "hostlist" when a name cannot be in a hostlist.
#include "rendezvous/plan_record.hpp"

#include <algorithm>
#include <limits>

#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/hostlist.hpp"
#include "core/json.hpp"
#include "keys.hpp"
#include "store/error.hpp"

namespace ddprun::rdzv {

using json = nlohmann::json;

namespace {

constexpr std::size_t kMaxNodes = std::size_t{1} << 20;

[[noreturn]] void malformed(const std::string& what) {
  throw store::Error(store::Error::Kind::protocol, "the published plan is malformed: " + what, "join");
}

json rank_runs(const std::vector<int>& ranks) {
  json runs = json::array();
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t end = i + 1;
    while (end < ranks.size() && ranks[end] == ranks[end - 1] + 1) ++end;
    runs.push_back({ranks[i], ranks[end - 1]});
    i = end;
  }
  return runs;
}

// Runs in the round's node order, which --rank-order topology makes other than ascending; each node
// rank once.
std::vector<int> expand_runs(const json& runs) {
  std::vector<int> out;
  for (const auto& run : runs) {
    const auto first = core::json_int<long long>(run.at(0));
    const auto end = core::json_int<long long>(run.at(1));
    if (first < 0 || end < first || end > std::numeric_limits<int>::max() ||
        static_cast<std::size_t>(end - first) >= kMaxNodes - out.size())
      malformed(fmt::format("node rank run [{}, {}] out of order or too long", first, end));
    for (long long r = first; r <= end; ++r) out.push_back(static_cast<int>(r));
  }
  std::vector<int> sorted = out;
  std::sort(sorted.begin(), sorted.end());
  const auto twice = std::adjacent_find(sorted.begin(), sorted.end());
  if (twice != sorted.end()) malformed(fmt::format("node rank {} listed twice", *twice));
  return out;
}

}  // namespace

std::string encode_plan_record(const PlanRecord& r) {
  json j = {{keys::plan_record::kPlan, r.plan},
            {keys::plan_record::kRanks, rank_runs(r.node_ranks)},
            {keys::plan_record::kActive, r.active}};
  try {
    j[keys::plan_record::kHostlist] = core::compress_hostlist(r.hosts);
  } catch (const core::Error&) {  // a name no hostlist can hold
    j[keys::plan_record::kHosts] = r.hosts;
  }
  return core::dump_json(j);
}

PlanRecord decode_plan_record(std::string_view bytes) {
  PlanRecord r;
  try {
    const json j = json::parse(bytes);
    r.plan = j.at(keys::plan_record::kPlan).get<std::string>();
    r.node_ranks = expand_runs(j.at(keys::plan_record::kRanks));
    if (j.contains(keys::plan_record::kHostlist)) {
      r.hosts = core::expand_hostlist(j.at(keys::plan_record::kHostlist).get<std::string>());
    } else {
      r.hosts = j.at(keys::plan_record::kHosts).get<std::vector<std::string>>();
    }
    r.active = core::json_int<std::size_t>(j.at(keys::plan_record::kActive));
  } catch (const store::Error&) {
    throw;
  } catch (const std::exception& e) {  // json's and the hostlist's errors
    malformed(e.what());
  }
  if (r.hosts.size() != r.node_ranks.size())
    malformed(fmt::format("{} hosts for {} node ranks", r.hosts.size(), r.node_ranks.size()));
  if (r.active > r.node_ranks.size())
    malformed(fmt::format("{} active of {} nodes", r.active, r.node_ranks.size()));
  return r;
}

}  // namespace ddprun::rdzv
