// Node 0's round: whom it waits for (the first round's arrivals and last call, a restart's survivors) and
// who of the nodes that joined runs workers (arrange_round). join.cpp runs it and publishes the plan.
#include <algorithm>
#include <set>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "core/elastic.hpp"
#include "core/rank_order.hpp"
#include "deadline.hpp"
#include "keys.hpp"
#include "rendezvous_impl.hpp"
#include "store/server.hpp"
#include "store/store.hpp"

namespace ddprun::rdzv {

using detail::Clock;
using detail::left_until;
using detail::seconds;
using nlohmann::json;

// Elastic, a round after a restart: every survivor of the last round is expected back at once (its
// teardown bounded by the grace), so the round closes when they are all in, not after a last call.
// Whoever did not come within rejoin_timeout is lost too; then the round goes on only with MIN and a
// strict majority of the last round (core::after_loss).
std::vector<int> Rendezvous::Impl::wait_for_survivors(PrefixStore& s) {
  const std::set<int> gone = monitor_.dropped();
  std::vector<std::string> expected;
  for (std::size_t i = 0; i < round_.previous.size(); ++i) {
    const int orig = round_.previous[i].orig_rank;
    const bool lost = std::find(round_.previous_lost.begin(), round_.previous_lost.end(),
                                static_cast<int>(i)) != round_.previous_lost.end();
    if (!lost && !gone.contains(orig))
      expected.push_back(keys::present(orig));  // after its arrival record: joined_ranks() lists it
  }
  // A survivor that declined (its health check failed) sets its present key too: it is missing at once.
  s.wait(expected, opts_.rejoin_timeout);
  auto ranks = joined_ranks(s);
  std::set<int> before;
  for (const auto& m : round_.previous) before.insert(m.orig_rank);
  // An agent that came late and waited for this round takes part only while its heartbeats run.
  const auto watching = server_->labels(labels::agent_prefix(opts_.attempt));
  std::erase_if(ranks, [&](int r) {
    return !before.contains(r) && r != opts_.node_rank &&
           std::find(watching.begin(), watching.end(), labels::agent(opts_.attempt, r)) == watching.end();
  });
  std::vector<int> missing;
  std::vector<int> missing_orig;
  for (std::size_t i = 0; i < round_.previous.size(); ++i) {
    if (!std::binary_search(ranks.begin(), ranks.end(), round_.previous[i].orig_rank)) {
      missing.push_back(static_cast<int>(i));
      missing_orig.push_back(round_.previous[i].orig_rank);
    }
  }
  const int waiting =
      static_cast<int>(ranks.size() + missing.size()) - static_cast<int>(round_.previous.size());
  const auto d = core::after_loss(round_.previous, missing, opts_.nnodes_min, true, waiting);
  if (!d.go_on) {
    const std::string why = fmt::format("rendezvous {} (run {}): {}", endpoint(), opts_.run_id, d.message);
    // A node that declined (its health check failed) is the cause: its line and its exit code.
    if (const auto cause = declined_cause(s, missing_orig))
      fail_join(why + "; " + cause->reason, cause->exit_code);
    fail_join(why);
  }
  return ranks;
}

// The first round (node 0): until MIN nodes are in, standbys included in an elastic job (one with
// restarts), then a last call (--rdzv-last-call) for the nodes that may still come: the active ones up to
// MAX and, under Slurm, the step's standbys. A node that declined (its --health-check failed) is not
// waited for. When every node that can come is in or declined and MIN is not reached, the round fails
// with the first decline's cause (outside Slurm, where standbys are known only as they come, after a last
// call for them). At the join deadline it fails naming the missing nodes. The wait is event driven; it
// is cut into slices only to say, now and then, who is still missing. An agent that could not start
// (fail_start) ends it too: the caller looks.
void Rendezvous::Impl::wait_first_round(PrefixStore& s) {
  const auto start = Clock::now();
  const auto deadline = start + opts_.join_timeout;
  const int actives = opts_.nagents > 0 ? std::min(opts_.nnodes_max, opts_.nagents) : opts_.nnodes_max;
  const int standbys =
      opts_.elastic && opts_.nagents > opts_.nnodes_max ? opts_.nagents - opts_.nnodes_max : 0;
  std::optional<Clock::time_point> last_call;
  auto next_progress = start + opts_.progress_interval;
  for (;;) {
    const std::int64_t active = s.add(keys::kArrivals, 0);
    const std::int64_t standby = s.add(keys::kStandbys, 0);
    const std::set<int> declined = declined_ranks(s);
    const auto declined_actives =
        std::count_if(declined.begin(), declined.end(), [&](int r) { return r < actives; });
    const std::int64_t in = active + (opts_.elastic ? standby : 0);
    const bool everyone = active + declined_actives >= actives &&
                          standby + static_cast<std::int64_t>(declined.size()) - declined_actives >= standbys;
    const bool short_of_min = in < opts_.nnodes_min && everyone && !declined.empty();
    if (in >= opts_.nnodes_min && everyone) return;
    if (short_of_min && opts_.agents_known) fail_short(s, static_cast<int>(in));
    if ((in >= opts_.nnodes_min || short_of_min) && !last_call) last_call = Clock::now() + opts_.last_call;
    if (last_call && Clock::now() >= *last_call) {
      if (in >= opts_.nnodes_min) return;
      if (short_of_min) fail_short(s, static_cast<int>(in));
    }
    std::vector<std::string> watched = {keys::arrived(active + 1), keys::standby_arrived(standby + 1),
                                        keys::declined(s.add(keys::kDeclined, 0) + 1)};
    if (start_errors_end_round()) watched.emplace_back(keys::kAbort);
    auto until = last_call ? std::min(deadline, *last_call) : deadline;
    if (opts_.on_progress) until = std::min(until, next_progress);
    if (const auto i = s.wait_any(watched, left_until(until))) {
      if (*i == 3) return;
      continue;  // one more arrival or decline: count again
    }
    if (Clock::now() >= deadline) break;
    if (!opts_.on_progress || Clock::now() < next_progress) continue;
    next_progress += opts_.progress_interval;
    const auto ranks = joined_ranks(s);
    const std::string refused = refusals();
    opts_.on_progress(fmt::format("rendezvous {} waiting {:.0f} s: {} of {} node(s) joined; missing: {}{}",
                                  endpoint(), std::chrono::duration<double>(Clock::now() - start).count(),
                                  ranks.size(), opts_.nnodes_max,
                                  describe_missing(ranks, opts_.nnodes_max, opts_.expected_hosts),
                                  refused.empty() ? refused : "; " + refused));
  }
  const auto ranks = joined_ranks(s);
  // A node that reached the store and was refused (a wrong token, another run id) is named with why; the
  // advice to check that ddprun started is for the nodes never heard of.
  const std::string refused = refusals();
  fail_join(fmt::format(
      "rendezvous {} (run {}) timed out after {:.1f} s: {} of {} node(s) joined{}; never arrived: {}. {}",
      endpoint(), opts_.run_id, seconds(opts_.join_timeout), ranks.size(), opts_.nnodes_max,
      opts_.nnodes_min < opts_.nnodes_max ? fmt::format(" (need at least {})", opts_.nnodes_min)
                                          : std::string{},
      describe_missing(ranks, opts_.nnodes_max, opts_.expected_hosts),
      refused.empty()
          ? fmt::format("Check that ddprun started on those nodes and can reach {} (--rdzv-timeout)",
                        endpoint())
          : fmt::format("Meanwhile {} (--rdzv-timeout)", refused)));
}

std::string Rendezvous::Impl::refusals() const {
  return server_ ? describe_refusals(server_->refusals()) : std::string();
}

// The join records of the nodes that joined, sorted by node rank.
std::vector<JoinInfo> Rendezvous::Impl::read_join_records(PrefixStore& s, const std::vector<int>& ranks) {
  std::vector<JoinInfo> joined;
  for (int r : ranks) {
    auto v = s.get(keys::node(r), Millis{0});
    if (!v) continue;
    try {
      joined.push_back(json::parse(*v).get<JoinInfo>());
    } catch (const std::exception& e) {
      fail_join(fmt::format("rendezvous {}: node rank {} sent a malformed join record: {}", endpoint(), r,
                            e.what()));
    }
  }
  std::sort(joined.begin(), joined.end(),
            [](const JoinInfo& a, const JoinInfo& b) { return a.node_rank < b.node_rank; });
  return joined;
}

std::vector<JoinInfo> arrange_round(std::vector<JoinInfo> joined, int nnodes_max, core::RankOrder order,
                                    int store_rank, const std::vector<core::Member>& previous,
                                    const std::map<int, std::string>& previous_addrs) {
  const auto max = static_cast<std::size_t>(std::max(nnodes_max, 0));
  // The store's host is node 0 of every plan: after a failover, an agent with a lower node rank may come
  // back (the old node 0, cut off and following the job).
  if (const auto host = std::find_if(joined.begin(), joined.end(),
                                     [&](const JoinInfo& j) { return j.node_rank == store_rank; });
      order == core::RankOrder::slurm && host != joined.end()) {
    std::rotate(joined.begin(), host, host + 1);
  }
  if (order == core::RankOrder::slurm || previous.empty()) {
    for (std::size_t i = 0; i < joined.size(); ++i) joined[i].standby = i >= max;
  } else {
    const auto group = [](const std::string& addr) { return core::topology_group(addr).path.value_or(""); };
    std::set<int> was_active;  // O(n log n): a round may hold thousands of nodes
    for (const auto& m : previous) {
      if (!m.standby) was_active.insert(m.orig_rank);
    }
    std::vector<core::StandbyCandidate> candidates;
    std::set<int> back;
    for (const auto& j : joined) {
      candidates.push_back({group(j.topology), was_active.contains(j.node_rank)});
      back.insert(j.node_rank);
    }
    std::vector<std::string> lost_groups;
    for (const auto& m : previous) {
      if (m.standby || back.contains(m.orig_rank)) continue;
      const auto addr = previous_addrs.find(m.orig_rank);
      lost_groups.push_back(addr == previous_addrs.end() ? std::string() : group(addr->second));
    }
    const auto active = core::choose_actives(candidates, lost_groups, static_cast<int>(max));
    for (std::size_t i = 0; i < joined.size(); ++i) joined[i].standby = !active[i];
  }
  // Active nodes first (the plan record's rule), each part in node-rank order: stable.
  std::stable_partition(joined.begin(), joined.end(), [](const JoinInfo& j) { return !j.standby; });
  if (order == core::RankOrder::slurm) return joined;
  const auto actives = static_cast<std::size_t>(
      std::count_if(joined.begin(), joined.end(), [](const JoinInfo& j) { return !j.standby; }));
  std::vector<core::OrderInput> in;
  for (std::size_t i = 0; i < actives; ++i)
    in.push_back({joined[i].topology, joined[i].node_rank == store_rank});
  std::vector<JoinInfo> out;
  out.reserve(joined.size());
  for (const auto& n : core::topology_order(in)) out.push_back(std::move(joined[n.index]));
  for (std::size_t i = actives; i < joined.size(); ++i) out.push_back(std::move(joined[i]));
  return out;
}

}  // namespace ddprun::rdzv
