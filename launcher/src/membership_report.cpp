#include "membership_report.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace ddprun::launcher {

namespace {

int rank_in(const std::vector<core::Member>& round, int orig) {
  const auto it =
      std::find_if(round.begin(), round.end(), [&](const core::Member& m) { return m.orig_rank == orig; });
  return it == round.end() ? -1 : static_cast<int>(it - round.begin());
}

int active(const std::vector<core::Member>& round) {
  return static_cast<int>(
      std::count_if(round.begin(), round.end(), [](const core::Member& m) { return !m.standby; }));
}

}  // namespace

std::string membership_line(int attempt, const std::vector<core::Member>& before,
                            const std::vector<core::Member>& after, int old_world, int new_world) {
  const auto c = core::membership_change(before, after);
  if (c.empty()) return {};
  std::vector<std::string> parts;
  if (!c.lost.empty()) parts.push_back(fmt::format("lost {}", core::describe_members(before, c.lost)));
  for (const auto& p : c.promoted) {
    parts.push_back(fmt::format("standby {} promoted to node rank {}", p.host, rank_in(after, p.orig_rank)));
  }
  // A standby that came after the last round closed, and waited for this one.
  for (const auto& j : c.joined) {
    parts.push_back(j.standby ? fmt::format("standby {} (it came late) joined as node rank {}", j.host,
                                            rank_in(after, j.orig_rank))
                              : fmt::format("standby {} (it came late) promoted to node rank {}", j.host,
                                            rank_in(after, j.orig_rank)));
  }
  return fmt::format("ddprun: attempt {}: {}; {} active node(s) (was {}), world size {} (was {})\n", attempt,
                     fmt::join(parts, "; "), active(after), active(before), new_world, old_world);
}

std::string attempts_line(const std::vector<AttemptRecord>& attempts) {
  if (attempts.size() < 2) return {};
  std::vector<std::string> parts;
  parts.reserve(attempts.size());
  for (const auto& a : attempts) {
    parts.push_back(a.exit_code == 0
                        ? fmt::format("{} (world size {}) succeeded", a.attempt, a.world_size)
                        : fmt::format("{} (world size {}) failed, exit {}{}{}", a.attempt, a.world_size,
                                      a.exit_code, a.cause.empty() ? "" : ": ", a.cause));
  }
  return fmt::format("ddprun: attempts: {}\n", fmt::join(parts, "; "));
}

nlohmann::json attempts_json(const std::vector<AttemptRecord>& attempts) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& a : attempts) {
    out.push_back({{"attempt", a.attempt},
                   {"world_size", a.world_size},
                   {"exit_code", a.exit_code},
                   {"cause", a.cause.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.cause)}});
  }
  return out;
}

void report_membership(agent::Events& ev, bool quiet, int attempt, const std::vector<core::Member>& before,
                       const std::vector<core::Member>& after, int old_world, int new_world) {
  const auto c = core::membership_change(before, after);
  if (c.empty()) return;
  if (!ev.json()) {
    if (!quiet) fmt::print(stderr, "{}", membership_line(attempt, before, after, old_world, new_world));
    return;
  }
  const nlohmann::json sizes = {
      {"attempt", attempt}, {"old_world_size", old_world}, {"new_world_size", new_world}};
  for (const auto& m : c.lost) {
    nlohmann::json e = sizes;
    e["lost_host"] = m.host;
    e["lost_node_rank"] = rank_in(before, m.orig_rank);
    e["standby"] = m.standby;
    ev.emit("node_lost", e);
  }
  // A standby that came late has no node rank in the round before (-1).
  std::vector<core::Member> promoted = c.promoted;
  for (const auto& m : c.joined) {
    if (!m.standby) promoted.push_back(m);
  }
  for (const auto& m : promoted) {
    nlohmann::json e = sizes;
    e["spare_host"] = m.host;
    e["old_node_rank"] = rank_in(before, m.orig_rank);
    e["new_node_rank"] = rank_in(after, m.orig_rank);
    ev.emit("spare_promoted", e);
  }
  nlohmann::json e = sizes;
  const auto hosts = [](const std::vector<core::Member>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& m : v) a.push_back(m.host);
    return a;
  };
  e["old_nnodes"] = active(before);
  e["new_nnodes"] = active(after);
  e["lost"] = hosts(c.lost);
  e["promoted"] = hosts(promoted);
  e["joined"] = hosts(c.joined);
  e["hosts"] = hosts(after);
  ev.emit("membership_changed", e);
}

}  // namespace ddprun::launcher
