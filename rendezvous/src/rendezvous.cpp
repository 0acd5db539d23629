#include "rendezvous/rendezvous.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>

#include <fmt/core.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/json.hpp"
#include "deadline.hpp"
#include "keys.hpp"
#include "store/client.hpp"
#include "store/server.hpp"
#include "store/store.hpp"

namespace ddprun::rdzv {
using detail::Clock;
using detail::left_until;
using detail::seconds;
using nlohmann::json;

// ---- JSON

void to_json(json& j, const JoinInfo& a) {
  j = json{{"node_rank", a.node_rank},
           {"hostname", a.hostname},
           {"addr", a.addr},
           {"local_world_size", a.local_world_size},
           {"gpus", a.gpus}};
}

void from_json(const json& j, JoinInfo& a) {
  a.node_rank = j.at("node_rank").get<int>();
  a.hostname = j.at("hostname").get<std::string>();
  a.addr = j.at("addr").get<std::string>();
  a.local_world_size = j.at("local_world_size").get<int>();
  a.gpus = j.at("gpus").get<std::vector<std::string>>();
}

// ---- pure helpers

std::string describe_missing(const std::vector<int>& joined_ranks, int nnodes_max,
                             const std::vector<std::string>& expected_hosts) {
  const std::set<int> joined(joined_ranks.begin(), joined_ranks.end());
  std::vector<std::string> parts;
  for (int r = 0; r < nnodes_max; ++r) {
    if (joined.contains(r)) continue;
    const auto i = static_cast<std::size_t>(r);
    if (i < expected_hosts.size() && !expected_hosts[i].empty()) {
      parts.push_back(fmt::format("{} (node rank {})", expected_hosts[i], r));
    } else {
      parts.push_back(fmt::format("node rank {}", r));
    }
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

// ---- Rendezvous

Rendezvous::Rendezvous(RendezvousOptions o) : opts_(std::move(o)) {
  if (opts_.nnodes_min < 1 || opts_.nnodes_max < opts_.nnodes_min) {
    throw Error(Error::Kind::usage,
                fmt::format("invalid node count {}:{}; use --nnodes N or MIN:MAX with 1 <= MIN "
                            "<= MAX",
                            opts_.nnodes_min, opts_.nnodes_max),
                "rendezvous");
  }
  if (opts_.node_rank < 0 || opts_.node_rank >= opts_.nnodes_max) {
    throw Error(Error::Kind::usage,
                fmt::format("node rank {} is outside 0..{}; check --node-rank / SLURM_NODEID",
                            opts_.node_rank, opts_.nnodes_max - 1),
                "rendezvous");
  }
  port_ = opts_.port;
  if (opts_.node_rank == 0) {
    ServerOptions so;
    so.host = opts_.listen_host;
    so.port = opts_.port;
    so.run_id = opts_.run_id;
    so.auth = opts_.auth;
    so.log = opts_.log;
    so.on_lost = [this](const std::string& label, const std::string& reason) { on_lost(label, reason); };
    server_ = std::make_unique<StoreServer>(std::move(so));
    port_ = server_->port();
  }
}

Rendezvous::~Rendezvous() {
  stop_watch();
  if (server_) {
    if (joined_ && !barrier_passed_) drain(opts_.heartbeat_timeout);
    server_->stop();
  }
}

void Rendezvous::drain(Millis limit) {
  if (!server_ || !joined_) return;
  // Only worth waiting for when the job is going down: on success the barrier already waited.
  if (!aborted()) return;
  linger(limit);
}

void Rendezvous::linger(Millis limit) {
  if (!server_) return;
  const auto deadline = Clock::now() + limit;
  const std::string watches = labels::agent_prefix(opts_.attempt);
  while (Clock::now() < deadline) {
    // Other agents still connected: main connections (one may still be joining) and watches.
    const std::size_t own_main = client_ && client_->connected() ? 1 : 0;
    const std::size_t own_watch = watching_.load() ? 1 : 0;
    const std::size_t mains = server_->labelled_count(labels::kMainPrefix);
    const std::size_t agents = server_->labelled_count(watches);
    if (mains <= own_main && agents <= own_watch) return;
    std::this_thread::sleep_for(Millis{10});  // shutdown path only
  }
}

std::string Rendezvous::endpoint() const {
  return fmt::format("{}:{}", opts_.host, port_);
}

std::string Rendezvous::key_prefix() const {
  return keys::attempt_prefix(opts_.attempt);
}

PrefixStore Rendezvous::store() const {
  return PrefixStore(key_prefix(), client_);
}

std::shared_ptr<TcpStore> Rendezvous::connect_client(const std::string& label, Millis liveness,
                                                     Millis connect_timeout, Millis op_timeout) const {
  ClientOptions co;
  // The master talks to its own server over loopback: no dependence on how its name resolves.
  const bool wildcard =
      opts_.listen_host.empty() || opts_.listen_host == "0.0.0.0" || opts_.listen_host == "::";
  co.host = !server_ ? opts_.host : (wildcard ? std::string("127.0.0.1") : opts_.listen_host);
  co.port = port_;
  co.run_id = opts_.run_id;
  co.auth = opts_.auth;
  co.label = label;
  co.liveness = liveness;
  co.connect_timeout = connect_timeout;
  co.op_timeout = op_timeout;
  try {
    return std::make_shared<TcpStore>(std::move(co));
  } catch (const Error& e) {
    if (!server_) throw;
    // Name the endpoint the user gave, not our loopback shortcut.
    throw Error(e.kind(), fmt::format("rendezvous store {}: {}", endpoint(), e.what()), e.op(), endpoint());
  }
}

void Rendezvous::ensure_connected() {
  if (client_ && client_->connected()) return;
  // Non-master agents keep retrying while the master starts, up to the join timeout.
  // The handshake is pipelined with the first call, so a peer that never answers (not our store)
  // is noticed by that call: bound it by the join timeout too (--rdzv-timeout).
  client_ = connect_client(labels::main_conn(opts_.node_rank), Millis{0}, opts_.join_timeout,
                           std::min(std::max(opts_.heartbeat_timeout, Millis{30000}), opts_.join_timeout));
}

std::string Rendezvous::host_of(int orig_rank) const {
  for (const auto& p : participants_) {
    if (p.orig_rank == orig_rank) return p.hostname;
  }
  const auto i = static_cast<std::size_t>(orig_rank);
  if (orig_rank >= 0 && i < opts_.expected_hosts.size()) return opts_.expected_hosts[i];
  return {};
}

Joined Rendezvous::join(const JoinInfo& me_in, const PlanFn& make_plan) {
  const auto start = Clock::now();
  const auto deadline = start + opts_.join_timeout;
  JoinInfo me = me_in;
  me.node_rank = opts_.node_rank;
  ensure_connected();
  PrefixStore s = store();

  // A node rank is claimed atomically: the second claimant is told who holds it.
  const std::int64_t claims = s.add(keys::rank_claim(me.node_rank), 1);
  if (claims > 1) {
    std::string holder = "another agent";
    try {
      if (auto v = s.get(keys::node(me.node_rank), Millis{2000})) {
        holder = fmt::format("host {}", json::parse(*v).at("hostname").get<std::string>());
      }
    } catch (const std::exception&) {
    }
    throw Error(Error::Kind::rejected,
                fmt::format("rendezvous {} (run {}): node rank {} is already taken by {}; every "
                            "node needs its own node rank (check --node-rank / SLURM_NODEID)",
                            endpoint(), opts_.run_id, me.node_rank, holder),
                "join", endpoint());
  }
  s.set(keys::node(me.node_rank), json(me).dump());
  const std::int64_t arrival = s.add(keys::kArrivals, 1);
  s.set(keys::arrived(arrival), std::to_string(me.node_rank));

  if (server_) run_master_round(make_plan);

  std::optional<std::size_t> got;
  for (;;) {
    const Millis left = left_until(deadline);
    const Millis slice = opts_.on_progress ? std::min(left, opts_.progress_interval) : left;
    got = s.wait_any({keys::kPlan, keys::kJoinError}, slice);
    if (got || slice >= left || Clock::now() >= deadline) break;
    opts_.on_progress(
        fmt::format("rendezvous {} waiting {:.0f} s for the master (node rank 0) to "
                    "publish the plan",
                    endpoint(), std::chrono::duration<double>(Clock::now() - start).count()));
  }
  if (!got) {
    throw Error(Error::Kind::timeout,
                fmt::format("rendezvous {} (run {}) timed out after {:.1f} s: the master (node "
                            "rank 0) published no plan; check that it runs and that every node "
                            "started (--rdzv-timeout)",
                            endpoint(), opts_.run_id, seconds(opts_.join_timeout)),
                "join", endpoint());
  }
  if (*got == 1) {
    auto msg = s.get(keys::kJoinError, Millis{0});
    throw Error(Error::Kind::join, msg.value_or("the rendezvous round failed on the master"), "join",
                endpoint());
  }
  auto published = s.get(keys::kPlan, Millis{0});
  return read_plan(published.value_or(""));
}

void Rendezvous::fail_join(const std::string& message) {
  try {
    store().set(keys::kJoinError, message);
    linger(opts_.heartbeat_timeout);  // let the waiting agents read it before we go
  } catch (const Error&) {
  }
  throw Error(Error::Kind::join, message, "join", endpoint());
}

void Rendezvous::run_master_round(const PlanFn& make_plan) {
  const auto start = Clock::now();
  const auto deadline = start + opts_.join_timeout;
  PrefixStore s = store();

  auto joined_ranks = [&] {
    std::vector<int> ranks;
    for (int r = 0; r < opts_.nnodes_max; ++r) {
      if (s.check({keys::node(r)})) ranks.push_back(r);
    }
    return ranks;
  };

  // Waiting is event driven: the n-th arrival writes "arrived/<n>". The wait is cut into slices
  // only to say, now and then, who is still missing.
  const std::string enough = keys::arrived(opts_.nnodes_min);
  bool arrived = false;
  for (;;) {
    const Millis left = left_until(deadline);
    const Millis slice = opts_.on_progress ? std::min(left, opts_.progress_interval) : left;
    arrived = s.wait({enough}, slice);
    if (arrived || slice >= left || Clock::now() >= deadline) break;
    const auto ranks = joined_ranks();
    opts_.on_progress(fmt::format("rendezvous {} waiting {:.0f} s: {} of {} node(s) joined; missing: {}",
                                  endpoint(), std::chrono::duration<double>(Clock::now() - start).count(),
                                  ranks.size(), opts_.nnodes_max,
                                  describe_missing(ranks, opts_.nnodes_max, opts_.expected_hosts)));
  }
  if (!arrived) {
    const auto ranks = joined_ranks();
    fail_join(
        fmt::format("rendezvous {} (run {}) timed out after {:.1f} s: {} of {} node(s) joined{}; never "
                    "arrived: {}. Check that ddprun started on those nodes and can reach {} (--rdzv-timeout)",
                    endpoint(), opts_.run_id, seconds(opts_.join_timeout), ranks.size(), opts_.nnodes_max,
                    opts_.nnodes_min < opts_.nnodes_max ? fmt::format(" (need at least {})", opts_.nnodes_min)
                                                        : std::string{},
                    describe_missing(ranks, opts_.nnodes_max, opts_.expected_hosts), endpoint()));
  }
  if (opts_.nnodes_min < opts_.nnodes_max) {
    // Last call: the round closes when MAX nodes are in, or this long after MIN were.
    s.wait({keys::arrived(opts_.nnodes_max)}, opts_.last_call);
  }

  std::vector<JoinInfo> joined;
  for (int r : joined_ranks()) {
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

  std::string plan;
  try {
    plan = make_plan(joined);
  } catch (const std::exception& e) {
    // Every agent fails with the same message; the master rethrows the original error.
    try {
      s.set(keys::kJoinError, e.what());
      linger(opts_.heartbeat_timeout);
    } catch (const Error&) {
    }
    throw;
  }
  json ranks = json::object();
  json hosts = json::array();
  for (std::size_t i = 0; i < joined.size(); ++i) {
    ranks[std::to_string(joined[i].node_rank)] = static_cast<int>(i);
    hosts.push_back(joined[i].hostname);
  }
  json published = {{keys::plan_record::kPlan, plan},
                    {keys::plan_record::kNodeRanks, ranks},
                    {keys::plan_record::kHosts, hosts}};
  s.set(keys::kPlan, core::dump_json(published));
}

Joined Rendezvous::read_plan(const std::string& published) {
  json j;
  Joined out;
  try {
    j = json::parse(published);
    out.plan = j.at(keys::plan_record::kPlan).get<std::string>();
  } catch (const std::exception& e) {
    throw Error(Error::Kind::protocol,
                fmt::format("rendezvous {}: the published plan is malformed: {}", endpoint(), e.what()),
                "join", endpoint());
  }
  const auto& ranks = j.at(keys::plan_record::kNodeRanks);
  const std::string mine = std::to_string(opts_.node_rank);
  if (!ranks.contains(mine)) {
    throw Error(Error::Kind::join,
                fmt::format("rendezvous {} (run {}): the round closed without this node (node "
                            "rank {}): it arrived after the last call; {} node(s) are running",
                            endpoint(), opts_.run_id, opts_.node_rank, ranks.size()),
                "join", endpoint());
  }
  participants_.assign(ranks.size(), {});
  const auto& hosts = j.value(keys::plan_record::kHosts, json::array());
  for (const auto& [orig, idx] : ranks.items()) {
    const auto i = static_cast<std::size_t>(idx.get<int>());
    if (i >= participants_.size()) continue;
    participants_[i].orig_rank = std::stoi(orig);
    if (i < hosts.size()) participants_[i].hostname = hosts[i].get<std::string>();
  }
  plan_node_rank_ = ranks.at(mine).get<int>();
  out.node_rank = plan_node_rank_;
  out.nnodes = static_cast<int>(participants_.size());
  joined_ = true;
  return out;
}

// ---- liveness and abort

void Rendezvous::fire(const core::Failure& info) {
  if (!watching_.load()) return;
  if (fired_.exchange(true)) return;
  std::function<void(const core::Failure&)> cb;
  {
    std::lock_guard lk(cb_mu_);
    cb = on_abort_;
  }
  if (cb) cb(info);
}

void Rendezvous::watch(std::function<void(const core::Failure&)> on_abort) {
  stop_watch();
  {
    std::lock_guard lk(cb_mu_);
    on_abort_ = std::move(on_abort);
  }
  fired_ = false;
  const int attempt = opts_.attempt;
  // The watch connection doubles as the heartbeat: a long poll renewed every heartbeat_interval,
  // which the server requires at least every heartbeat_timeout.
  watch_client_ = connect_client(labels::agent(attempt, opts_.node_rank), opts_.heartbeat_timeout,
                                 opts_.heartbeat_timeout, opts_.heartbeat_timeout);
  watching_ = true;
  if (server_) {
    {
      std::lock_guard lk(lost_mu_);
      monitor_stop_ = false;
    }
    monitor_client_ =
        connect_client(labels::monitor(attempt), Millis{0}, opts_.heartbeat_timeout, opts_.heartbeat_timeout);
    monitor_thread_ = std::thread([this, attempt, mon = monitor_client_] { monitor_loop(attempt, mon); });
  }
  const std::string abort_key = key_prefix() + keys::kAbort;
  watch_thread_ = std::thread([this, wc = watch_client_, abort_key] {
    for (;;) {
      try {
        auto got = wc->wait_any({abort_key}, opts_.heartbeat_interval);
        if (!watching_.load()) return;
        if (!got) continue;
        auto v = wc->get(abort_key, Millis{0});
        core::Failure info;
        try {
          info = core::decode_failure(v.value_or("{}"));
        } catch (const std::exception& e) {
          info.reason = fmt::format("abort with an unreadable cause: {}", e.what());
          info.exit_code = 1;
          info.time = core::failure_now();
        }
        fire(info);
        return;
      } catch (const Error& e) {
        if (!watching_.load()) return;
        core::Failure info;
        info.reason = fmt::format("lost the rendezvous master at {}: {}", endpoint(), e.what());
        info.host = host_of(0).empty() ? opts_.host : host_of(0);
        info.node_rank = 0;
        info.exit_code = 1;
        info.time = core::failure_now();
        fire(info);
        return;
      }
    }
  });
}

void Rendezvous::on_lost(const std::string& label, const std::string& reason) {
  // Server thread: queue only; the monitor thread talks to the store.
  {
    std::lock_guard lk(lost_mu_);
    lost_.emplace_back(label, reason);
  }
  lost_cv_.notify_one();
}

void Rendezvous::monitor_loop(int attempt, std::shared_ptr<TcpStore> mon) {
  PrefixStore s(keys::attempt_prefix(attempt), mon);
  for (;;) {
    std::pair<std::string, std::string> ev;
    {
      std::unique_lock lk(lost_mu_);
      lost_cv_.wait(lk, [&] { return monitor_stop_ || !lost_.empty(); });
      if (monitor_stop_) return;
      ev = std::move(lost_.front());
      lost_.pop_front();
    }
    const auto& [label, reason] = ev;
    // Only the watches of this attempt's other agents count.
    const auto agent = labels::agent_node_rank(label, attempt);
    if (!agent || *agent == opts_.node_rank) continue;
    const int orig = *agent;
    try {
      // A node that reached a barrier is leaving; its goodbye is not a failure.
      if (s.check({keys::left(orig)})) continue;
      int plan_rank = orig;
      std::string host;
      for (std::size_t i = 0; i < participants_.size(); ++i) {
        if (participants_[i].orig_rank == orig) {
          plan_rank = static_cast<int>(i);
          host = participants_[i].hostname;
        }
      }
      core::Failure info;
      info.reason = fmt::format("lost the agent on {} (node rank {}): {}",
                                host.empty() ? std::string("an unknown host") : host, plan_rank, reason);
      info.host = host;
      info.node_rank = plan_rank;
      info.exit_code = 1;
      info.time = core::failure_now();
      // First abort wins: a more specific cause published before the drop stays the root cause.
      s.compare_set(keys::kAbort, "", core::encode_failure(info));
    } catch (const Error&) {
      return;  // our own server is gone: nothing left to tell
    }
  }
}

core::Failure Rendezvous::abort(const core::Failure& cause_in) {
  core::Failure cause = cause_in;
  if (cause.time == core::FailureTime{}) cause.time = core::failure_now();
  try {
    ensure_connected();
    const std::string mine = core::encode_failure(cause);
    const std::string winner = store().compare_set(keys::kAbort, "", mine);
    if (winner == mine) return cause;
    return core::decode_failure(winner);
  } catch (const std::exception&) {
    return cause;
  }
}

std::optional<core::Failure> Rendezvous::aborted() {
  try {
    ensure_connected();
    if (auto v = store().get(keys::kAbort, Millis{0})) return core::decode_failure(*v);
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

bool Rendezvous::barrier(const std::string& name, Millis timeout) {
  const auto deadline = Clock::now() + timeout;
  const int n = joined_ ? static_cast<int>(participants_.size()) : opts_.nnodes_max;
  bool ok = false;
  try {
    ensure_connected();
    PrefixStore s = store();
    s.set(keys::left(opts_.node_rank), "1");
    if (s.add(keys::barrier_count(name), 1) >= n) s.set(keys::barrier_done(name), "1");
    const auto got = s.wait_any({keys::barrier_done(name), keys::kAbort}, left_until(deadline));
    ok = got && *got == 0;
    // Leaving: from here on the master closing the store is expected, not a lost master. This must
    // happen before the ack, which lets the master stop serving.
    if (ok) watching_ = false;
    if (ok && !server_) {
      s.set(keys::barrier_ack(name, opts_.node_rank), "1");
    } else if (ok) {
      // Keep serving until every other node has seen the barrier pass (bounded).
      std::vector<std::string> acks;
      for (const auto& p : participants_) {
        if (p.orig_rank != opts_.node_rank) acks.push_back(keys::barrier_ack(name, p.orig_rank));
      }
      if (!acks.empty()) s.wait(acks, std::min(left_until(deadline) + Millis{1000}, Millis{10000}));
    }
  } catch (const Error&) {
    ok = false;
  }
  if (ok) {
    barrier_passed_ = true;
    stop_watch();
  }
  return ok;
}

void Rendezvous::stop_watch() {
  watching_ = false;
  if (watch_client_) watch_client_->close();
  if (watch_thread_.joinable()) {
    // Called from inside the abort callback (e.g. the agent tears down from there): the watch
    // thread is already on its way out; it must not wait for itself.
    if (watch_thread_.get_id() == std::this_thread::get_id()) {
      watch_thread_.detach();
    } else {
      watch_thread_.join();
    }
  }
  watch_client_.reset();
  {
    std::lock_guard lk(lost_mu_);
    monitor_stop_ = true;
    lost_.clear();
  }
  lost_cv_.notify_all();
  if (monitor_client_) monitor_client_->close();
  if (monitor_thread_.joinable()) monitor_thread_.join();
  monitor_client_.reset();
}

void Rendezvous::next_attempt() {
  stop_watch();
  ++opts_.attempt;
  participants_.clear();
  plan_node_rank_ = -1;
  joined_ = false;
  barrier_passed_ = false;
  fired_ = false;
}

}  // namespace ddprun::rdzv
