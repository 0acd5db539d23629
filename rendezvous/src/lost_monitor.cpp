// Node 0's lost-agent monitor: lost_monitor.hpp.
#include "lost_monitor.hpp"

#include <algorithm>
#include <memory>
#include <optional>

#include <fmt/core.h>

#include "core/failure.hpp"
#include "keys.hpp"
#include "store/error.hpp"
#include "store/server.hpp"
#include "store/store.hpp"

namespace ddprun::rdzv {

void LostMonitor::start(StoreServer& server, MonitorRound round) {
  if (thread_.joinable()) return;
  {
    std::lock_guard lk(mu_);
    stop_ = false;
  }
  thread_ = std::thread([this, &server, r = std::move(round)] { loop(server, r); });
}

void LostMonitor::stop() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
    lost_.clear();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void LostMonitor::on_lost(const std::string& label, const std::string& reason) {
  {
    std::lock_guard lk(mu_);
    lost_.emplace_back(label, reason);
    lost_labels_.insert(label);  // kept past the monitor's end, for drain and finish
  }
  cv_.notify_one();
}

std::set<std::string> LostMonitor::lost_labels() const {
  std::lock_guard lk(mu_);
  return lost_labels_;
}

void LostMonitor::forget_lost_labels() {
  std::lock_guard lk(mu_);
  lost_labels_.clear();
}

std::set<int> LostMonitor::dropped() const {
  std::lock_guard lk(mu_);
  return dropped_;
}

void LostMonitor::forget_dropped() {
  std::lock_guard lk(mu_);
  dropped_.clear();
}

void LostMonitor::loop(StoreServer& server, const MonitorRound& r) {
  // In-process: node 0's store needs no connection to itself for this.
  PrefixStore s(keys::attempt_prefix(r.attempt), std::make_shared<ServerStore>(server));
  // An agent that stops or dies after the plan but before it opens its watch is never reported by the
  // server: every watch is due within the heartbeat timeout of the plan.
  bool watches_checked = false;
  for (;;) {
    std::optional<std::pair<std::string, std::string>> ev;
    {
      std::unique_lock lk(mu_);
      const auto ready = [&] { return stop_ || !lost_.empty(); };
      if (watches_checked) {
        cv_.wait(lk, ready);
      } else if (!cv_.wait_until(lk, r.watches_due, ready)) {
        watches_checked = true;  // due now: checked below, once
      }
      if (stop_) return;
      if (!lost_.empty()) {
        ev = std::move(lost_.front());
        lost_.pop_front();
      }
    }
    try {
      if (!ev) {
        publish_missing_watches(s, server, r);
        continue;
      }
      // Only the watches of this attempt's other agents count.
      // A node that arrived too late for the round (MIN:MAX) is none of ours.
      const auto orig = labels::agent_node_rank(ev->first, r.attempt);
      const auto ours = [&](int rank) {
        return std::any_of(r.members.begin(), r.members.end(),
                           [&](const core::Member& p) { return p.orig_rank == rank; });
      };
      if (orig && *orig != r.node_rank && ours(*orig)) publish_lost(s, r, *orig, ev->second);
    } catch (const store::Error&) {
      return;  // our own server is gone: nothing left to tell
    }
  }
}

// The other participants without an open watch are lost: never watched, or gone since.
void LostMonitor::publish_missing_watches(PrefixStore& s, StoreServer& server, const MonitorRound& r) {
  std::set<int> watching;
  for (const auto& label : server.labels(labels::agent_prefix(r.attempt))) {
    if (const auto rank = labels::agent_node_rank(label, r.attempt)) watching.insert(*rank);
  }
  for (const auto& p : r.members) {
    if (p.orig_rank == r.node_rank || watching.contains(p.orig_rank)) continue;
    {
      std::lock_guard lk(mu_);
      lost_labels_.insert(labels::agent(r.attempt, p.orig_rank));
    }
    publish_lost(
        s, r, p.orig_rank,
        fmt::format("no heartbeat: no watch connection {} ms after the plan was published (stopped or "
                    "gone before it started watching)",
                    r.heartbeat_timeout.count()));
  }
}

void LostMonitor::publish_lost(PrefixStore& s, const MonitorRound& r, int orig, const std::string& reason) {
  int plan_rank = orig;
  std::string host;
  bool standby = false;
  for (std::size_t i = 0; i < r.members.size(); ++i) {
    if (r.members[i].orig_rank == orig) {
      plan_rank = static_cast<int>(i);
      host = r.members[i].host;
      standby = r.members[i].standby;
    }
  }
  {
    std::lock_guard lk(mu_);
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

}  // namespace ddprun::rdzv
