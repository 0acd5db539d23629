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
#include "store/client.hpp"
#include "store/server.hpp"
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
  watch_.set_self_host(me.hostname);
  ensure_connected();
  // An elastic job may be past its first round: this agent joins the attempt it runs, if it runs still.
  if (!server_ && opts_.elastic) {
    if (const auto code = job_over()) {
      Joined out;
      out.ended = *code;
      return out;
    }
    adopt_current_attempt();
  }
  bool waiting = false;  // it came after a round closed: a standby for the next one, as long as the job runs
  for (;;) {
    PrefixStore s = store();
    arrive(s, me);
    if (server_) run_node0_round(make_plan);
    const PlanWait got = wait_for_plan(s, start, waiting);
    if (got == PlanWait::over) {
      Joined out;
      out.ended = job_over().value_or(1);
      return out;
    }
    if (got == PlanWait::timed_out) throw no_plan_error();
    PlanRecord rec = decode_published(s.get(keys::kPlan, Millis{0}).value_or(""));
    const bool in =
        std::find(rec.node_ranks.begin(), rec.node_ranks.end(), opts_.node_rank) != rec.node_ranks.end();
    if (!in && !server_ && opts_.elastic) {
      // Torchrun's rule: a node that comes after the round closed waits for the next one.
      wait_as_standby(!waiting);
      waiting = true;
      continue;
    }
    Joined joined = read_plan(std::move(rec));
    watch_.set_node0_host(round_.host_of(0, opts_.expected_hosts));
    if (server_) start_monitor();
    return joined;
  }
}

// Node 0 published no plan within --rdzv-timeout.
store::Error Rendezvous::Impl::no_plan_error() const {
  return store::Error(store::Error::Kind::timeout,
                      fmt::format("rendezvous {} (run {}) timed out after {:.1f} s: node 0 published "
                                  "no plan; check that it runs and that every node "
                                  "started (--rdzv-timeout)",
                                  endpoint(), opts_.run_id, seconds(opts_.join_timeout)),
                      "join", endpoint());
}

// An elastic agent that came after its round closed: said once (`first`), then it waits for the next.
void Rendezvous::Impl::wait_as_standby(bool first) {
  if (first && opts_.on_waiting) {
    opts_.on_waiting(fmt::format(
        "rendezvous {} (run {}): the round of attempt {} closed before this node (node rank {}) arrived; "
        "it waits as a standby for the next round (a lost node's place) or the job's end",
        endpoint(), opts_.run_id, opts_.attempt, opts_.node_rank));
  }
  wait_for_next_round();
}

// Claims the node rank, publishes the join record, counts the arrival and starts the heartbeats.
void Rendezvous::Impl::arrive(PrefixStore& s, const JoinInfo& me) {
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

// Until the plan is published (plan), the job ended (over: a waiting agent's news) or the join
// deadline passed (timed_out); throws node 0's error if the round failed there. `waiting`: an agent
// that came late waits without a deadline and says nothing meanwhile.
Rendezvous::Impl::PlanWait Rendezvous::Impl::wait_for_plan(PrefixStore& s, Clock::time_point start,
                                                           bool waiting) {
  const auto deadline = start + opts_.join_timeout;
  std::optional<std::size_t> got;
  std::vector<std::string> watched = {s.prefix() + keys::kPlan, s.prefix() + keys::kJoinError, keys::kOver};
  // The first round also ends when an agent could not start (fail_start).
  if (start_errors_end_round()) watched.push_back(s.prefix() + keys::kAbort);
  const bool progress = opts_.on_progress && !waiting;
  for (;;) {
    // A waiting agent looks now and then whether its watch found node 0 silent (a stopped node 0 never
    // closes the connection this wait holds).
    const Millis left = waiting ? Millis{1000} : left_until(deadline);
    const Millis slice = progress ? std::min(left, opts_.progress_interval) : left;
    got = client_->wait_any(watched, slice);
    if (got || (!waiting && (slice >= left || Clock::now() >= deadline))) break;
    if (const auto lost = waiting ? watch_.lost_node0() : std::nullopt) {
      throw store::Error(store::Error::Kind::io, lost->reason, "join", endpoint());
    }
    if (!progress) continue;
    opts_.on_progress(
        fmt::format("rendezvous {} waiting {:.0f} s for node 0 to "
                    "publish the plan",
                    endpoint(), std::chrono::duration<double>(Clock::now() - start).count()));
  }
  if (!got) return PlanWait::timed_out;
  if (*got == 3) leave_after_start_failure(s);
  if (*got == 2) return PlanWait::over;
  if (*got == 1) {
    const auto msg = s.get(keys::kJoinError, Millis{0});
    // A round that failed for a declined node ends with that node's exit code (125: its health check).
    if (const auto code = s.get(keys::kJoinErrorCode, Millis{0})) {
      core::Failure f;
      f.exit_code = std::atoi(code->c_str());
      f.reason = msg.value_or("");
      start_failure_ = f;
      if (opts_.on_start_failure) opts_.on_start_failure();
      await_reads(s, static_cast<int>(round_.previous.size()), true);
    }
    throw Error(msg.value_or("the rendezvous round failed on node 0"), "join", endpoint());
  }
  return PlanWait::plan;
}

// ---- start-up errors: an agent that could not start publishes why, and every agent leaves with it

core::Failure Rendezvous::Impl::fail_start(const core::Failure& cause_in) {
  core::Failure cause = cause_in;
  if (cause.time == core::FailureTime{}) cause.time = core::failure_now();
  // An elastic round after a restart closes without a node that does not come back: nobody waits.
  // But node 0 runs that round: the others, waiting for its plan, end with its line and code.
  if (!start_errors_end_round()) {
    if (server_) {
      try {
        PrefixStore s = store();
        const std::string who = cause.host.empty()
                                    ? fmt::format("node rank {}", cause.node_rank)
                                    : fmt::format("{} (node rank {})", cause.host, cause.node_rank);
        s.set(keys::kJoinErrorCode, std::to_string(cause.exit_code));
        s.set(keys::kJoinError, fmt::format("{} could not start: {}", who, cause.reason));
        linger(opts_.rejoin_timeout);
      } catch (const store::Error&) {
      }
    }
    return cause;
  }
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
  await_reads(s, opts_.nagents > 0 ? opts_.nagents : opts_.nnodes_max, true);
}

// Counts this agent in `start_read` (unless it did already) and waits until `agents` have (at most the
// join timeout): a failure every agent leaves with is read by all before the first one exits, whose exit
// may end the others' (srun --kill-on-bad-exit).
void Rendezvous::Impl::await_reads(PrefixStore& s, int agents, bool count) {
  try {
    if (count) s.set(keys::start_read(s.add(keys::kStartRead, 1)), std::to_string(opts_.node_rank));
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

void Rendezvous::Impl::fail_join(const std::string& message, int exit_code) {
  if (exit_code != 1) {
    core::Failure f;
    f.exit_code = exit_code;
    f.reason = message;
    start_failure_ = f;
  }
  try {
    if (exit_code != 1) {
      // Read by every agent of the last round (wait_for_plan), this one included, before the node that
      // declined leaves (decline).
      PrefixStore s = store();
      s.set(keys::start_read(s.add(keys::kStartRead, 1)), std::to_string(opts_.node_rank));
      s.set(keys::kJoinErrorCode, std::to_string(exit_code));
    }
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
    wait_first_round(s);
    // An agent that could not start ends the first round before any plan.
    if (start_errors_end_round() && s.check({keys::kAbort})) leave_after_start_failure(s);
    in = joined_ranks(s);
  }
  // The first MAX in node order run workers; the rest are standbys (elastic only: otherwise no rank
  // beyond MAX can join). --rank-order topology reorders them.
  std::vector<JoinInfo> joined = arrange_round(read_join_records(s, in), opts_.nnodes_max, opts_.rank_order,
                                               opts_.node_rank, round_.previous, round_.topology_addrs);
  round_.topology_addrs.clear();
  for (const auto& j : joined) {
    if (!j.topology.empty()) round_.topology_addrs.emplace(j.node_rank, j.topology);
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
  // Before the plan: an agent that reads the plan without itself in it finds the next round's number.
  job_store().set(keys::kCurrentAttempt, std::to_string(opts_.attempt));
  s.set(keys::kPlan, encode_plan_record(record));
  monitor_.forget_dropped();
  round_.plan_published = Clock::now();  // from here on every participant's watch is due (lost_monitor.cpp)
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

// A round after a restart of an elastic job (one with restarts: MIN < MAX, standbys, or late standbys).
bool Rendezvous::Impl::elastic_round() const {
  return !round_.previous.empty() && opts_.elastic;
}

// ---- every agent: the published plan

PlanRecord Rendezvous::Impl::decode_published(const std::string& published) const {
  try {
    return decode_plan_record(published);
  } catch (const store::Error& e) {
    throw store::Error(store::Error::Kind::protocol, fmt::format("rendezvous {}: {}", endpoint(), e.what()),
                       "join", endpoint());
  }
}

Joined Rendezvous::Impl::read_plan(PlanRecord rec) {
  // In the round's node order, which --rank-order topology may have changed: not sorted.
  const auto mine = std::find(rec.node_ranks.begin(), rec.node_ranks.end(), opts_.node_rank);
  if (mine == rec.node_ranks.end() || *mine != opts_.node_rank) {
    throw Error(fmt::format("rendezvous {} (run {}): the round closed without this node (node "
                            "rank {}): it arrived after the last call; {} node(s) are running (with "
                            "--max-restarts it would wait as a standby for the next round)",
                            endpoint(), opts_.run_id, opts_.node_rank, rec.node_ranks.size()),
                "join", endpoint());
  }
  Joined out;
  round_.members.assign(rec.node_ranks.size(), {});
  out.members.reserve(round_.members.size());
  for (std::size_t i = 0; i < round_.members.size(); ++i) {
    round_.members[i] = {rec.node_ranks[i], std::move(rec.hosts[i]), i >= rec.active};
    out.members.push_back(round_.members[i]);
  }
  out.plan = std::move(rec.plan);
  round_.plan_node_rank = static_cast<int>(mine - rec.node_ranks.begin());
  out.node_rank = round_.plan_node_rank;
  out.nnodes = static_cast<int>(round_.members.size());
  out.attempt = opts_.attempt;
  round_.joined = true;
  return out;
}

}  // namespace ddprun::rdzv
