// Liveness: every agent's watch (heartbeats and the pushed abort, on its one connection) and, on
// node 0, the monitor that turns a lost agent into a published abort.
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <set>

#include <fmt/core.h>

#include "core/stack_groups.hpp"
#include "deadline.hpp"
#include "keys.hpp"
#include "rendezvous_impl.hpp"
#include "store/client.hpp"
#include "store/server.hpp"
#include "store/store.hpp"

namespace ddprun::rdzv {

using detail::Clock;

namespace {
constexpr int kPongEvery = 3;  // heartbeats per pong asked for; the node-0 timeout is 6+ intervals

std::int64_t now_ms() {
  return std::chrono::duration_cast<Millis>(Clock::now().time_since_epoch()).count();
}

// The stacks requests among the events go to `keep`; the others, returned, are the abort.
template <typename Keep>
std::vector<TcpStore::Event> without_stacks_requests(std::vector<TcpStore::Event> events, const Keep& keep) {
  std::vector<TcpStore::Event> aborts;
  for (auto& e : events) {
    if (e.index == 1) {
      keep(std::move(e.value));
    } else {
      aborts.push_back(std::move(e));
    }
  }
  return aborts;
}
}  // namespace

void Rendezvous::Impl::fire(const core::Failure& info) {
  if (!watching_.load()) return;
  if (fired_.exchange(true)) return;
  std::function<void(const core::Failure&)> cb;
  {
    std::lock_guard lk(cb_mu_);
    cb = on_abort_;
    if (!cb) pending_ = info;  // handed over when watch() installs the callback
  }
  if (cb) cb(info);
}

LivenessTiming liveness_timing(Millis heartbeat_interval, Millis heartbeat_timeout, int nnodes) {
  // Node 0 gets at most kMaxHeartbeatRate heartbeats a second, whatever the job's size.
  const Millis by_rate{(static_cast<std::int64_t>(std::max(nnodes, 1)) * 1000 + kMaxHeartbeatRate - 1) /
                       kMaxHeartbeatRate};
  const Millis interval = std::max({heartbeat_interval, by_rate, Millis{1}});
  // Three missed heartbeats before an agent is lost; the agent waits twice that before it calls a
  // busy node 0 lost.
  const Millis agent_timeout = std::max(heartbeat_timeout, 3 * interval);
  return {interval, agent_timeout, 2 * agent_timeout};
}

void Rendezvous::Impl::watch(std::function<void(const core::Failure&)> on_abort) {
  if (!watching_.load() && !fired_.load()) start_liveness();  // e.g. after a barrier stopped it
  std::optional<core::Failure> early;
  // An abort that came before the watch is handed on outside the lock.
  std::function<void(const core::Failure&)> call;
  {
    std::lock_guard lk(cb_mu_);
    on_abort_ = std::move(on_abort);
    early = std::exchange(pending_, std::nullopt);
    if (early) call = on_abort_;
  }
  if (call) call(*early);
}

void Rendezvous::Impl::start_liveness() {
  stop_watch();
  {
    std::lock_guard lk(cb_mu_);
    on_abort_ = nullptr;
    pending_.reset();
  }
  fired_ = false;
  check_watch_ = false;  // the watch below replaces wait_beside_check's subscription
  {
    // A request of an earlier attempt was answered then; one still waiting is pushed again below.
    std::lock_guard lk(stacks_mu_);
    stacks_request_.reset();
  }
  {
    std::lock_guard lk(cb_mu_);
    node0_host_ = host_of(0);  // the Slurm node list's first host until the plan names it
  }
  const int attempt = opts_.attempt;
  const int nnodes = joined_ ? static_cast<int>(members_.size()) : opts_.nnodes_max;
  const LivenessTiming t = liveness_timing(opts_.heartbeat_interval, opts_.heartbeat_timeout, nnodes);
  // One connection per agent: the main one now carries the heartbeat and the abort push too.
  ensure_connected();
  // Index 0 the abort; index 1 `ddprun stacks`' request (docs/observe.md), pushed on each write, so
  // that no agent reads the store for it.
  client_->watch(labels::agent(attempt, opts_.node_rank), t.agent_timeout,
                 {key_prefix() + keys::kAbort, core::kStacksRequestKey});
  if (wake_fd_ < 0) wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  last_turn_ms_ = now_ms();
  longest_gap_ms_ = 0;
  watching_ = true;
  watch_thread_ = std::thread([this, conn = client_, t] { watch_loop(conn, t); });
  if (server_ && joined_) start_monitor();
}

// Node 0, once the participants are known (the monitor reads them).
void Rendezvous::Impl::start_monitor() {
  if (monitor_thread_.joinable()) return;
  {
    std::lock_guard lk(lost_mu_);
    monitor_stop_ = false;
  }
  const int attempt = opts_.attempt;
  monitor_thread_ = std::thread([this, attempt] { monitor_loop(attempt); });
}

// Each turn of the watch: the time since the last one is time this agent did not run (cut_off).
Millis Rendezvous::Impl::watch_turn() {
  const std::int64_t now = now_ms();
  const std::int64_t gap = now - last_turn_ms_.exchange(now);
  if (gap > longest_gap_ms_.load()) longest_gap_ms_ = gap;
  return Millis{gap};
}

// A pong every kPongEvery heartbeats, and at every one once node 0 has been quiet that long: node 0
// answers a third of them, and a silent node 0 still shows. False: the connection is gone.
bool Rendezvous::Impl::send_heartbeat(TcpStore& conn, const LivenessTiming& t, std::uint64_t& beats) {
  const bool quiet = Clock::now() - conn.last_heard() >= kPongEvery * t.interval;
  return conn.heartbeat(quiet || beats++ % kPongEvery == 0);
}

// Node 0 silent past node0_timeout. This agent may itself have been stopped: what came meanwhile is
// read before judging (an abort fires, and sets `fired`). True: node 0 is lost, and that fired.
bool Rendezvous::Impl::node0_lost(TcpStore& conn, const LivenessTiming& t, bool& fired) {
  const auto events = without_stacks_requests(conn.poll_events(Millis{0}),
                                              [this](std::string v) { keep_stacks_request(std::move(v)); });
  if (!events.empty()) {
    fire_event(events.front().value);
    fired = true;
    return false;
  }
  if (Clock::now() - conn.last_heard() <= t.node0_timeout) return false;
  fire_lost_node0(fmt::format("no answer to heartbeats for {} ms", t.node0_timeout.count()), &conn);
  return true;
}

// Heartbeats every interval, the abort as a pushed event, and a lost node 0: the connection
// closed, or nothing heard for node0_timeout. Until the watch stops: after the abort too, since
// this agent's teardown may take the whole grace (a trainer that checkpoints on SIGTERM) and a
// node is lost only when its agent is (node 0 would drop a silent one, and an elastic job's
// next round would go on without a healthy node).
void Rendezvous::Impl::watch_loop(const std::shared_ptr<TcpStore>& conn, const LivenessTiming& t) {
  auto next_beat = Clock::now();
  const auto turn = [this] { return watch_turn(); };
  const auto keep = [this](std::string v) { keep_stacks_request(std::move(v)); };
  // How long the others wait before they declare this agent lost: past it, they went on without it.
  const Millis others_wait = server_ ? t.node0_timeout : t.agent_timeout;
  // The last turn on the way out (a stopped agent may find its connection gone as it resumes); from then
  // on nothing turns, and cut_off counts no more time.
  struct LastTurn {
    std::function<void()> turn;
    std::atomic<std::int64_t>& last;
    ~LastTurn() {
      turn();
      last = 0;
    }
  } last_turn{turn, last_turn_ms_};
  std::uint64_t beats = 0;
  bool fired = false;  // this attempt's cause went out: from here on only the heartbeats matter
  try {
    while (watching_.load()) {
      if (const Millis gap = turn(); gap > others_wait && !fired) {
        fire_cut_off(gap, others_wait, conn.get());
        fired = true;
      }
      if (Clock::now() >= next_beat) {
        if (!send_heartbeat(*conn, t, beats)) {
          if (!fired) fire_lost_node0("the connection is gone", conn.get());
          return;
        }
        next_beat = Clock::now() + t.interval;
      }
      const auto events =
          without_stacks_requests(conn->poll_events(detail::left_until(next_beat), wake_fd_), keep);
      if (!watching_.load()) return;
      if (fired) continue;
      if (!events.empty()) {
        fire_event(events.front().value);
        fired = true;
        continue;
      }
      // On node 0 the store runs in this very process: a silent store is a busy one (fanning
      // out a plan to thousands of nodes), never a lost one.
      if (!server_ && Clock::now() - conn->last_heard() > t.node0_timeout && node0_lost(*conn, t, fired)) {
        return;
      }
    }
  } catch (const store::Error& e) {
    if (watching_.load() && !fired) fire_lost_node0(e.what(), conn.get());
  }
}

void Rendezvous::Impl::keep_stacks_request(std::string value) {
  std::lock_guard lk(stacks_mu_);
  stacks_request_ = std::move(value);
}

std::optional<std::string> Rendezvous::Impl::stacks_request() {
  std::lock_guard lk(stacks_mu_);
  return stacks_request_;
}

void Rendezvous::Impl::fire_event(const std::string& value) {
  core::Failure info;
  try {
    info = core::decode_failure(value.empty() ? "{}" : value);
  } catch (const std::exception& e) {
    info.reason = fmt::format("abort with an unreadable cause: {}", e.what());
    info.exit_code = 1;
    info.time = core::failure_now();
  }
  fire(info);
}

core::Failure Rendezvous::Impl::lost_node0_failure(const std::string& why) {
  core::Failure info;
  info.reason = fmt::format("lost the rendezvous store at {}: {}", endpoint(), why);
  {
    std::lock_guard lk(cb_mu_);
    info.host = node0_host_.empty() ? opts_.host : node0_host_;
  }
  info.node_rank = 0;
  info.exit_code = 1;
  info.lost = true;
  info.time = core::failure_now();
  return info;
}

// This agent did not run for longer than the others wait before they declare it lost (stopped, starved):
// they went on without it. Its own judgement, as a lost node 0 is: nothing of the store says so, and what
// it would hear now (peers gone) tells the wrong story.
void Rendezvous::Impl::fire_cut_off(Millis gap, Millis others_wait, TcpStore* conn) {
  core::Failure info;
  info.reason = fmt::format(
      "this node did not run for {:.1f} s (stopped, or starved), longer than the {:.0f} s after which the "
      "others declare it lost: it was cut off from the job",
      std::chrono::duration<double>(gap).count(), std::chrono::duration<double>(others_wait).count());
  info.node_rank = opts_.node_rank;
  info.exit_code = 1;
  info.time = core::failure_now();
  {
    std::lock_guard lk(cb_mu_);
    info.host = self_host_;
    lost_node0_ = info;
  }
  node0_lost_ = true;
  // An exit barrier waiting on this connection would wait for peers that are gone.
  if (conn != nullptr && barrier_waiting_.load()) conn->close();
  fire(info);
}

void Rendezvous::Impl::fire_lost_node0(const std::string& why, TcpStore* conn) {
  const core::Failure info = lost_node0_failure(why);
  {
    std::lock_guard lk(cb_mu_);
    lost_node0_ = info;
  }
  node0_lost_ = true;
  // An exit barrier waiting on this connection would never hear from this node 0 again.
  if (conn != nullptr && barrier_waiting_.load()) conn->close();
  fire(info);
}

void Rendezvous::Impl::on_lost(const std::string& label, const std::string& reason) {
  // Server thread: queue only; the monitor thread talks to the store.
  {
    std::lock_guard lk(lost_mu_);
    lost_.emplace_back(label, reason);
    lost_labels_.insert(label);  // kept past the monitor's end, for linger()
  }
  lost_cv_.notify_one();
}

void Rendezvous::Impl::monitor_loop(int attempt) {
  // In-process: node 0's store needs no connection to itself for this.
  PrefixStore s(keys::attempt_prefix(attempt), std::make_shared<ServerStore>(*server_));
  // An agent that stops or dies after the plan but before it opens its watch is never reported
  // by the server: every watch is due within the heartbeat timeout of the plan.
  const Clock::time_point watches_due = plan_published_ + opts_.heartbeat_timeout;
  bool watches_checked = false;
  for (;;) {
    std::optional<std::pair<std::string, std::string>> ev;
    {
      std::unique_lock lk(lost_mu_);
      const auto ready = [&] { return monitor_stop_ || !lost_.empty(); };
      if (watches_checked) {
        lost_cv_.wait(lk, ready);
      } else if (!lost_cv_.wait_until(lk, watches_due, ready)) {
        watches_checked = true;  // due now: checked below, once
      }
      if (monitor_stop_) return;
      if (!lost_.empty()) {
        ev = std::move(lost_.front());
        lost_.pop_front();
      }
    }
    try {
      if (!ev) {
        publish_missing_watches(s, attempt);
        continue;
      }
      // Only the watches of this attempt's other agents count.
      // A node that arrived too late for the round (MIN:MAX) is none of ours.
      const auto orig = labels::agent_node_rank(ev->first, attempt);
      const auto ours = [&](int r) {
        return std::any_of(members_.begin(), members_.end(),
                           [&](const core::Member& p) { return p.orig_rank == r; });
      };
      if (orig && *orig != opts_.node_rank && ours(*orig)) publish_lost(s, *orig, ev->second);
    } catch (const store::Error&) {
      return;  // our own server is gone: nothing left to tell
    }
  }
}

// The other participants without an open watch are lost: never watched, or gone since.
void Rendezvous::Impl::publish_missing_watches(PrefixStore& s, int attempt) {
  std::set<int> watching;
  for (const auto& label : server_->labels(labels::agent_prefix(attempt))) {
    if (const auto r = labels::agent_node_rank(label, attempt)) watching.insert(*r);
  }
  for (const auto& p : members_) {
    if (p.orig_rank == opts_.node_rank || watching.contains(p.orig_rank)) continue;
    {
      std::lock_guard lk(lost_mu_);
      lost_labels_.insert(labels::agent(attempt, p.orig_rank));
    }
    publish_lost(
        s, p.orig_rank,
        fmt::format("no heartbeat: no watch connection {} ms after the plan was published (stopped or "
                    "gone before it started watching)",
                    opts_.heartbeat_timeout.count()));
  }
}

void Rendezvous::Impl::publish_lost(PrefixStore& s, int orig, const std::string& reason) {
  int plan_rank = orig;
  std::string host;
  bool standby = false;
  for (std::size_t i = 0; i < members_.size(); ++i) {
    if (members_[i].orig_rank == orig) {
      plan_rank = static_cast<int>(i);
      host = members_[i].host;
      standby = members_[i].standby;
    }
  }
  {
    std::lock_guard lk(lost_mu_);
    dropped_.insert(orig);  // the next round does not wait for it (elastic)
  }
  // A lost standby is dropped, nothing more. A node that reached a barrier leaves once it passed, and
  // that goodbye is not a failure; one lost while it waited there is (srun --kill-on-bad-exit then
  // TERMs the other agents, whose stop must not be named first).
  if (standby) return;
  const bool at_barrier = s.check({keys::left(orig)});
  if (at_barrier && s.check({keys::barrier_done("exit")})) return;
  core::Failure info;
  info.reason = fmt::format("lost the agent on {} (node rank {}){}: {}",
                            host.empty() ? std::string("an unknown host") : host, plan_rank,
                            at_barrier ? " at the exit barrier, its ranks done" : "", reason);
  info.host = host;
  info.node_rank = plan_rank;
  info.exit_code = 1;
  info.lost = true;
  info.time = core::failure_now();
  // First abort wins: a more specific cause published before the drop stays the root cause.
  s.compare_set(keys::kAbort, "", core::encode_failure(info));
}

void Rendezvous::Impl::stop_watch() {
  watching_ = false;
  if (wake_fd_ >= 0) {
    const std::uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
  }
  if (watch_thread_.joinable()) {
    // Called from inside the abort callback (e.g. the agent tears down from there): the watch
    // thread is already on its way out; it must not wait for itself.
    if (watch_thread_.get_id() == std::this_thread::get_id()) {
      watch_thread_.detach();
    } else {
      watch_thread_.join();
    }
  }
  if (wake_fd_ >= 0) {
    std::uint64_t drained = 0;
    (void)!::read(wake_fd_, &drained, sizeof drained);
  }
  {
    std::lock_guard lk(lost_mu_);
    monitor_stop_ = true;
    lost_.clear();
  }
  lost_cv_.notify_all();
  if (monitor_thread_.joinable()) monitor_thread_.join();
}

std::optional<Millis> Rendezvous::Impl::cut_off() const {
  std::int64_t gap = longest_gap_ms_.load();
  // A watch that has not turned since this agent runs again still counts.
  if (const std::int64_t last = last_turn_ms_.load(); watching_.load() && last != 0) {
    gap = std::max(gap, now_ms() - last);
  }
  const int nnodes = joined_ ? static_cast<int>(members_.size()) : opts_.nnodes_max;
  const LivenessTiming t = liveness_timing(opts_.heartbeat_interval, opts_.heartbeat_timeout, nnodes);
  const Millis others_wait = server_ ? t.node0_timeout : t.agent_timeout;
  if (gap <= others_wait.count()) return std::nullopt;
  return Millis{gap};
}

}  // namespace ddprun::rdzv
