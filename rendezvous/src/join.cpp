// The join round: node-rank claims, join records, arrivals; on node 0 the round itself
// (wait for the nodes, build the plan, publish it); on every agent, reading the published plan.
#include <algorithm>
#include <set>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/json.hpp"
#include "core/rank_order.hpp"
#include "deadline.hpp"
#include "keys.hpp"
#include "rendezvous/plan_record.hpp"
#include "rendezvous_impl.hpp"
#include "store/store.hpp"

namespace ddprun::rdzv {

using detail::Clock;
using detail::left_until;
using detail::seconds;
using nlohmann::json;

void to_json(json& j, const JoinInfo& info) {
  j = {{"node_rank", info.node_rank}, {"hostname", info.hostname},
       {"addr", info.addr},           {"local_world_size", info.local_world_size},
       {"gpus", info.gpus},           {"topology", info.topology},
       {"spare", info.standby}};  // the wire keeps its key (docs/protocol.md)
}

void from_json(const json& j, JoinInfo& info) {
  info.node_rank = core::json_int<int>(j, "node_rank");
  info.hostname = j.at("hostname").get<std::string>();
  info.addr = j.at("addr").get<std::string>();
  info.local_world_size = core::json_int<int>(j, "local_world_size");
  info.gpus = j.at("gpus").get<std::vector<std::string>>();
  info.topology = j.at("topology").get<std::string>();
  if (info.topology.size() > core::kMaxTopologyAddr + 1) throw core::Error("topology address too long");
  info.standby = j.at("spare").get<bool>();
}

Joined Rendezvous::Impl::join(const JoinInfo& me_in, const PlanFn& make_plan) {
  const auto start = Clock::now();
  JoinInfo me = me_in;
  me.node_rank = opts_.node_rank;
  ensure_connected();
  PrefixStore s = store();
  claim_node_rank(s, me.node_rank);
  s.set(keys::node(me.node_rank), core::dump_json(json(me)));
  // A standby's arrival is counted apart, so that the first round's MIN and MAX count active nodes.
  if (me.node_rank >= opts_.nnodes_max) {
    s.set(keys::standby_arrived(s.add(keys::kStandbys, 1)), std::to_string(me.node_rank));
  } else {
    s.set(keys::arrived(s.add(keys::kArrivals, 1)), std::to_string(me.node_rank));
  }
  // Only a round after a restart waits for these (wait_for_survivors); the first one costs nothing.
  if (opts_.attempt > 0) s.set(keys::present(me.node_rank), "1");
  // Heartbeats start now, while the plan is awaited and delivered: a node starved while the plan
  // fans out, or spawning its workers right after, is still heard; a stopped or dead one is lost.
  start_liveness();

  if (server_) run_node0_round(make_plan);

  if (!wait_for_plan(s, start)) {
    throw store::Error(store::Error::Kind::timeout,
                       fmt::format("rendezvous {} (run {}) timed out after {:.1f} s: node 0 published "
                                   "no plan; check that it runs and that every node "
                                   "started (--rdzv-timeout)",
                                   endpoint(), opts_.run_id, seconds(opts_.join_timeout)),
                       "join", endpoint());
  }
  Joined joined = read_plan(s.get(keys::kPlan, Millis{0}).value_or(""));
  {
    std::lock_guard lk(cb_mu_);
    node0_host_ = host_of(0);
  }
  if (server_) start_monitor();
  return joined;
}

// A node rank is claimed atomically: the second claimant is told who holds it.
void Rendezvous::Impl::claim_node_rank(PrefixStore& s, int node_rank) {
  if (s.add(keys::rank_claim(node_rank), 1) <= 1) return;
  std::string holder = "another agent";
  try {
    if (auto v = s.get(keys::node(node_rank), Millis{2000})) {
      holder = fmt::format("host {}", json::parse(*v).at("hostname").get<std::string>());
    }
  } catch (const std::exception&) {
  }
  throw store::Error(store::Error::Kind::rejected,
                     fmt::format("rendezvous {} (run {}): node rank {} is already taken by {}; every "
                                 "node needs its own node rank (check --node-rank / SLURM_NODEID)",
                                 endpoint(), opts_.run_id, node_rank, holder),
                     "join", endpoint());
}

// True once the plan is published; throws node 0's error if the round failed there, false
// at the join deadline.
bool Rendezvous::Impl::wait_for_plan(PrefixStore& s, Clock::time_point start) {
  const auto deadline = start + opts_.join_timeout;
  std::optional<std::size_t> got;
  // The first round also ends when an agent could not start (fail_start).
  std::vector<std::string> watched = {keys::kPlan, keys::kJoinError};
  if (start_errors_end_round()) watched.emplace_back(keys::kAbort);
  for (;;) {
    const Millis left = left_until(deadline);
    const Millis slice = opts_.on_progress ? std::min(left, opts_.progress_interval) : left;
    got = s.wait_any(watched, slice);
    if (got || slice >= left || Clock::now() >= deadline) break;
    opts_.on_progress(
        fmt::format("rendezvous {} waiting {:.0f} s for node 0 to "
                    "publish the plan",
                    endpoint(), std::chrono::duration<double>(Clock::now() - start).count()));
  }
  if (got && *got == 2) leave_after_start_failure(s);
  if (got && *got == 1) {
    auto msg = s.get(keys::kJoinError, Millis{0});
    throw Error(msg.value_or("the rendezvous round failed on node 0"), "join", endpoint());
  }
  return got.has_value();
}

// ---- start-up errors: an agent that could not start publishes why, and every agent leaves with it

core::Failure Rendezvous::Impl::fail_start(const core::Failure& cause_in) {
  core::Failure cause = cause_in;
  if (cause.time == core::FailureTime{}) cause.time = core::failure_now();
  // An elastic round after a restart closes without a node that does not come back: nobody waits.
  if (!start_errors_end_round()) return cause;
  ensure_connected();
  PrefixStore s = store();
  // The round closed without this node (elastic, MIN met): the job runs on, as for a late node.
  if (s.check({keys::kPlan})) return cause;
  const std::string mine = core::encode_failure(cause);
  const std::string winner = s.compare_set(keys::kAbort, "", mine);
  core::Failure won = cause;
  if (winner != mine) {
    try {
      won = core::decode_failure(winner);
    } catch (const core::Error&) {
    }
  }
  start_failure_ = won;
  if (opts_.on_start_failure) opts_.on_start_failure();
  await_start_failure_read(s);
  return won;
}

// Every agent has read the start-up error, or the join deadline passed. Node 0 serves its store
// until then; the others may see it close once the last one has read it, which ends their wait too.
void Rendezvous::Impl::await_start_failure_read(PrefixStore& s) {
  const int agents = opts_.nagents > 0 ? opts_.nagents : opts_.nnodes_max;
  try {
    s.set(keys::start_read(s.add(keys::kStartRead, 1)), std::to_string(opts_.node_rank));
    s.wait({keys::start_read(agents)}, opts_.join_timeout);
  } catch (const store::Error&) {
  }
}

void Rendezvous::Impl::leave_after_start_failure(PrefixStore& s) {
  core::Failure f;
  try {
    f = core::decode_failure(s.get(keys::kAbort, Millis{0}).value_or(""));
  } catch (const core::Error& e) {
    throw store::Error(
        store::Error::Kind::protocol,
        fmt::format("rendezvous {}: the published root cause is malformed: {}", endpoint(), e.what()), "join",
        endpoint());
  }
  start_failure_ = f;
  if (opts_.on_start_failure) opts_.on_start_failure();
  await_start_failure_read(s);
  const std::string who = f.host.empty() ? fmt::format("node rank {}", f.node_rank)
                                         : fmt::format("{} (node rank {})", f.host, f.node_rank);
  throw Error(fmt::format("{} could not start: {}", who, f.reason), "join", endpoint());
}

void Rendezvous::Impl::fail_join(const std::string& message) {
  try {
    store().set(keys::kJoinError, message);
    linger(opts_.heartbeat_timeout);  // let the waiting agents read it before we go
  } catch (const store::Error&) {
  }
  throw Error(message, "join", endpoint());
}

// ---- node 0's round

void Rendezvous::Impl::run_node0_round(const PlanFn& make_plan) {
  PrefixStore s = store();
  std::vector<int> in;  // node ranks that joined
  if (elastic_round()) {
    in = wait_for_survivors(s);
  } else {
    wait_for_arrivals(s);
    // Last call: the round closes when every expected agent (MAX, standbys included) is in, or this
    // long after MIN were. Under Slurm the step's node count (nagents) says how many can come at all.
    const int actives = opts_.nagents > 0 ? std::min(opts_.nnodes_max, opts_.nagents) : opts_.nnodes_max;
    std::vector<std::string> all = {keys::arrived(actives)};
    if (opts_.elastic && opts_.nagents > opts_.nnodes_max)
      all.push_back(keys::standby_arrived(opts_.nagents - opts_.nnodes_max));
    if (opts_.nnodes_min < actives || all.size() > 1) {
      const auto deadline = Clock::now() + opts_.last_call;
      for (const auto& key : all) {
        std::vector<std::string> watched = {key};
        if (start_errors_end_round()) watched.emplace_back(keys::kAbort);
        if (s.wait_any(watched, left_until(deadline)) == std::size_t{1}) break;
      }
    }
    // An agent that could not start ends the first round before any plan.
    if (start_errors_end_round() && s.check({keys::kAbort})) leave_after_start_failure(s);
    in = joined_ranks(s);
  }
  // The first MAX in node order run workers; the rest are standbys (elastic only: otherwise no rank
  // beyond MAX can join). --rank-order topology reorders them.
  std::vector<JoinInfo> joined = arrange_round(read_join_records(s, in), opts_.nnodes_max, opts_.rank_order,
                                               opts_.node_rank, previous_, topology_addrs_);
  topology_addrs_.clear();
  for (const auto& j : joined) {
    if (!j.topology.empty()) topology_addrs_.emplace(j.node_rank, j.topology);
  }
  std::string plan;
  try {
    plan = make_plan(joined);
  } catch (const std::exception& e) {
    // Every agent fails with the same message; node 0 rethrows the original error.
    try {
      s.set(keys::kJoinError, e.what());
      linger(opts_.heartbeat_timeout);
    } catch (const store::Error&) {
    }
    throw;
  }
  PlanRecord record;
  record.plan = std::move(plan);
  for (const auto& j : joined) {
    record.node_ranks.push_back(j.node_rank);
    record.hosts.push_back(j.hostname);
  }
  record.active = std::min(joined.size(), static_cast<std::size_t>(opts_.nnodes_max));
  s.set(keys::kPlan, encode_plan_record(record));
  {
    std::lock_guard lk(lost_mu_);
    dropped_.clear();
  }
  plan_published_ = Clock::now();  // from here on every participant's watch is due (liveness.cpp)
}

// The node ranks that arrived, from the arrival records: standbys' ranks lie beyond MAX, and
// node 0 outside Slurm does not know how many there are.
std::vector<int> Rendezvous::Impl::joined_ranks(PrefixStore& s) const {
  std::set<int> ranks;
  const auto read = [&](const char* counter, std::string (*key)(std::int64_t)) {
    const std::int64_t n = s.add(counter, 0);
    for (std::int64_t i = 1; i <= n; ++i) {
      // Written right after the count (join()): a moment's wait at most.
      const auto v = s.get(key(i), Millis{2000});
      if (!v) continue;
      try {
        ranks.insert(std::stoi(*v));
      } catch (const std::exception&) {
      }
    }
  };
  read(keys::kArrivals, keys::arrived);
  read(keys::kStandbys, keys::standby_arrived);
  return {ranks.begin(), ranks.end()};
}

// Whether a start-up error (fail_start) ends this round on every agent: the first round's, and a
// fail-fast job's after a restart (a node whose --health-check fails then), where the others would
// otherwise wait for the node; an elastic round after a restart goes on without it instead.
bool Rendezvous::Impl::start_errors_end_round() const {
  return opts_.attempt == 0 || !elastic_round();
}

// A round after a restart of an elastic job: MIN < MAX, or standbys (which node 0 outside Slurm
// learns of only when they join).
bool Rendezvous::Impl::elastic_round() const {
  return !previous_.empty() &&
         (opts_.elastic ||
          std::any_of(previous_.begin(), previous_.end(), [](const core::Member& m) { return m.standby; }));
}

// Elastic, a round after a restart: every survivor of the last round is expected back at once (its
// teardown bounded by the grace), so the round closes when they are all in, not after a last call.
// Whoever did not come within rejoin_timeout is lost too; then the round goes on only with MIN and a
// strict majority of the last round (core::after_loss).
std::vector<int> Rendezvous::Impl::wait_for_survivors(PrefixStore& s) {
  std::set<int> gone;
  {
    std::lock_guard lk(lost_mu_);
    gone = dropped_;
  }
  std::vector<std::string> expected;
  for (std::size_t i = 0; i < previous_.size(); ++i) {
    const int orig = previous_[i].orig_rank;
    const bool lost =
        std::find(previous_lost_.begin(), previous_lost_.end(), static_cast<int>(i)) != previous_lost_.end();
    if (!lost && !gone.contains(orig))
      expected.push_back(keys::present(orig));  // after its arrival record: joined_ranks() lists it
  }
  s.wait(expected, opts_.rejoin_timeout);
  auto ranks = joined_ranks(s);
  std::vector<int> missing;
  for (std::size_t i = 0; i < previous_.size(); ++i) {
    if (!std::binary_search(ranks.begin(), ranks.end(), previous_[i].orig_rank))
      missing.push_back(static_cast<int>(i));
  }
  const auto d = core::after_loss(previous_, missing, opts_.nnodes_min, true);
  if (!d.go_on) fail_join(fmt::format("rendezvous {} (run {}): {}", endpoint(), opts_.run_id, d.message));
  return ranks;
}

// Until nnodes_min agents arrived; at the deadline, fails the round naming the missing nodes.
void Rendezvous::Impl::wait_for_arrivals(PrefixStore& s) {
  const auto start = Clock::now();
  const auto deadline = start + opts_.join_timeout;
  // Waiting is event driven: the n-th arrival writes "arrived/<n>". The wait is cut into slices
  // only to say, now and then, who is still missing.
  // The first round also ends when an agent could not start (fail_start): the caller looks.
  // Under Slurm an elastic job's node 0 knows its standbys (the step's nodes beyond MAX): they count
  // towards MIN, so that an active node that never comes (a failed --health-check) leaves its place
  // to a standby after the last call, as a lost node does.
  const bool standbys_count = opts_.elastic && opts_.nagents > opts_.nnodes_max;
  std::vector<std::string> watched = {keys::arrived(opts_.nnodes_min)};
  if (start_errors_end_round()) watched.emplace_back(keys::kAbort);
  for (;;) {
    if (standbys_count) {
      const std::int64_t active = s.add(keys::kArrivals, 0);
      const std::int64_t standbys = s.add(keys::kStandbys, 0);
      if (active + standbys >= opts_.nnodes_min) return;
      watched = {keys::arrived(active + 1), keys::standby_arrived(standbys + 1)};
      if (start_errors_end_round()) watched.emplace_back(keys::kAbort);
    }
    const Millis left = left_until(deadline);
    const Millis slice = opts_.on_progress ? std::min(left, opts_.progress_interval) : left;
    if (const auto i = s.wait_any(watched, slice)) {
      if (!standbys_count || watched[*i] == keys::kAbort) return;
      continue;  // one more arrival: count again
    }
    if (slice >= left || Clock::now() >= deadline) break;
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

// ---- every agent: the published plan

Joined Rendezvous::Impl::read_plan(const std::string& published) {
  PlanRecord rec;
  try {
    rec = decode_plan_record(published);
  } catch (const store::Error& e) {
    throw store::Error(store::Error::Kind::protocol, fmt::format("rendezvous {}: {}", endpoint(), e.what()),
                       "join", endpoint());
  }
  // In the round's node order, which --rank-order topology may have changed: not sorted.
  const auto mine = std::find(rec.node_ranks.begin(), rec.node_ranks.end(), opts_.node_rank);
  if (mine == rec.node_ranks.end() || *mine != opts_.node_rank) {
    throw Error(fmt::format("rendezvous {} (run {}): the round closed without this node (node "
                            "rank {}): it arrived after the last call; {} node(s) are running",
                            endpoint(), opts_.run_id, opts_.node_rank, rec.node_ranks.size()),
                "join", endpoint());
  }
  Joined out;
  members_.assign(rec.node_ranks.size(), {});
  out.members.reserve(members_.size());
  for (std::size_t i = 0; i < members_.size(); ++i) {
    members_[i] = {rec.node_ranks[i], std::move(rec.hosts[i]), i >= rec.active};
    out.members.push_back(members_[i]);
  }
  out.plan = std::move(rec.plan);
  plan_node_rank_ = static_cast<int>(mine - rec.node_ranks.begin());
  out.node_rank = plan_node_rank_;
  out.nnodes = static_cast<int>(members_.size());
  joined_ = true;
  return out;
}

}  // namespace ddprun::rdzv
