#include "core/elastic.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace ddprun::core {

bool has_majority(int present, int previous) {
  return 2 * present > previous;
}

int shrink_floor(int agents, int nnodes_min) {
  int n = agents;
  while (n - 1 >= nnodes_min && n - 1 >= 1 && has_majority(n - 1, n)) --n;
  return n;
}

std::optional<std::string> survives_no_loss(int agents, int nnodes_min) {
  if (shrink_floor(agents, nnodes_min) < agents) return std::nullopt;
  return fmt::format(
      "this elastic job survives no lost node: {} of its {} nodes left would not be a strict majority of "
      "the last round; run {} nodes or more (standbys count) to survive one (docs/elastic.md)",
      agents - 1, agents, std::max(3, nnodes_min + 1));
}

namespace {

bool contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::string plural(std::size_t n, const char* word) {
  return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s");
}

}  // namespace

std::string describe_members(const std::vector<Member>& members, const std::vector<Member>& which) {
  std::vector<std::string> parts;
  for (const auto& w : which) {
    const auto it = std::find_if(members.begin(), members.end(),
                                 [&](const Member& m) { return m.orig_rank == w.orig_rank; });
    const auto rank = it == members.end() ? w.orig_rank : static_cast<int>(it - members.begin());
    parts.push_back(w.host.empty() ? fmt::format("node rank {}", rank)
                                   : fmt::format("{} (node rank {})", w.host, rank));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

AfterLoss after_loss(const std::vector<Member>& members, const std::vector<int>& lost, int nnodes_min,
                     bool elastic, int waiting) {
  AfterLoss out;
  std::vector<Member> gone;
  for (std::size_t i = 0; i < members.size(); ++i) {
    (contains(lost, static_cast<int>(i)) ? gone : out.survivors).push_back(members[i]);
  }
  const int survivors = static_cast<int>(out.survivors.size());
  const int left = survivors + waiting;
  const auto standbys = waiting + std::count_if(out.survivors.begin(), out.survivors.end(),
                                                [](const Member& m) { return m.standby; });
  const std::string names = describe_members(members, gone);
  if (!elastic) {
    out.message = fmt::format(
        "lost {}; the job is not elastic: without --max-restarts a lost node ends it (docs/elastic.md)",
        names);
  } else if (left < nnodes_min) {
    out.message =
        fmt::format("lost {}; {} left{}, fewer than the minimum of {} (--nnodes {}:MAX){}", names,
                    plural(static_cast<std::size_t>(left), "node"), standbys > 0 ? " with the standbys" : "",
                    nnodes_min, nnodes_min, standbys > 0 ? "" : ", and no standby was waiting");
  } else if (!has_majority(survivors, static_cast<int>(members.size()))) {
    out.message = fmt::format(
        "lost {}; {} of {} left, not a strict majority of the last round, so the "
        "job stops rather than risk two jobs after a network partition",
        names, survivors, members.size());
  } else {
    out.go_on = true;
  }
  return out;
}

std::optional<std::string> loss_ends_job(const std::vector<Member>& members, const std::vector<int>& lost,
                                         int nnodes_min, bool elastic, bool restart_due) {
  if (lost.empty() || (elastic && !restart_due)) return std::nullopt;
  auto d = after_loss(members, lost, nnodes_min, elastic);
  if (d.go_on) return std::nullopt;
  // Too few left: the next round judges, with the standbys waiting there.
  if (elastic && static_cast<int>(d.survivors.size()) < nnodes_min) return std::nullopt;
  return std::move(d.message);
}

std::optional<int> failover_host(const std::vector<Member>& members, const std::vector<int>& lost) {
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (!contains(lost, static_cast<int>(i))) return static_cast<int>(i);
  }
  return std::nullopt;
}

int failover_port(int base_port, int generation, int master_port) {
  const int port = base_port + generation;
  // Never worker rank 0's MASTER_PORT (under Slurm the derived pair is P, P+1): the old master's
  // workers may still hold it while they die.
  return generation > 0 && base_port < master_port && port >= master_port ? port + 1 : port;
}

MembershipChange membership_change(const std::vector<Member>& before, const std::vector<Member>& after) {
  MembershipChange c;
  const auto find = [](const std::vector<Member>& v, int orig) {
    return std::find_if(v.begin(), v.end(), [&](const Member& m) { return m.orig_rank == orig; });
  };
  for (const auto& m : before) {
    const auto it = find(after, m.orig_rank);
    if (it == after.end()) {
      c.lost.push_back(m);
    } else if (m.standby && !it->standby) {
      c.promoted.push_back(*it);
    }
  }
  for (const auto& m : after) {
    if (find(before, m.orig_rank) == before.end()) c.joined.push_back(m);
  }
  return c;
}

}  // namespace ddprun::core
