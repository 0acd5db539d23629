// Every agent's liveness watch: watch.hpp.
#include "watch.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <utility>
#include <vector>

#include <fmt/core.h>

#include "barrier_gate.hpp"
#include "deadline.hpp"
#include "status_board.hpp"
#include "store/client.hpp"

namespace ddprun::rdzv {

using detail::Clock;

namespace {
constexpr int kPongEvery = 3;  // heartbeats per pong asked for; the node-0 timeout is 6+ intervals

std::int64_t now_ms() {
  return std::chrono::duration_cast<Millis>(Clock::now().time_since_epoch()).count();
}
}  // namespace

Watch::~Watch() {
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void Watch::rearm(std::string node0_host) {
  std::lock_guard lk(mu_);
  on_abort_ = nullptr;
  pending_.reset();
  fired_ = false;
  node0_host_ = std::move(node0_host);  // the Slurm node list's first host until the plan names it
}

void Watch::start(WatchRound round) {
  if (wake_fd_ < 0) wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  {
    std::lock_guard lk(mu_);
    last_turn_ms_ = now_ms();
    longest_gap_ms_ = 0;
  }
  watching_ = true;
  thread_ = std::thread([this, r = std::move(round)] { loop(r); });
}

void Watch::stop() {
  watching_ = false;
  if (wake_fd_ >= 0) {
    const std::uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
  }
  if (thread_.joinable()) {
    // Called from inside the abort callback (e.g. the agent tears down from there): the thread is already
    // on its way out; it must not wait for itself.
    if (thread_.get_id() == std::this_thread::get_id()) {
      thread_.detach();
    } else {
      thread_.join();
    }
  }
  if (wake_fd_ >= 0) {
    std::uint64_t drained = 0;
    (void)!::read(wake_fd_, &drained, sizeof drained);
  }
}

bool Watch::fired() const {
  std::lock_guard lk(mu_);
  return fired_;
}

void Watch::install(Callback on_abort) {
  std::optional<core::Failure> early;
  // An abort that came before the callback is handed on outside the lock.
  Callback call;
  {
    std::lock_guard lk(mu_);
    on_abort_ = std::move(on_abort);
    early = std::exchange(pending_, std::nullopt);
    if (early) call = on_abort_;
  }
  if (call) call(*early);
}

void Watch::fire(const core::Failure& info) {
  if (!watching_.load()) return;
  Callback cb;
  {
    std::lock_guard lk(mu_);
    if (std::exchange(fired_, true)) return;
    cb = on_abort_;
    if (!cb) pending_ = info;  // handed over when install() gives a callback
  }
  if (cb) cb(info);
}

void Watch::set_node0_host(std::string host) {
  std::lock_guard lk(mu_);
  node0_host_ = std::move(host);
}

void Watch::set_self_host(std::string host) {
  std::lock_guard lk(mu_);
  self_host_ = std::move(host);
}

std::optional<core::Failure> Watch::pending() const {
  std::lock_guard lk(mu_);
  return pending_;
}

bool Watch::node0_lost() const {
  std::lock_guard lk(mu_);
  return lost_node0_.has_value();
}

std::optional<core::Failure> Watch::lost_node0() const {
  std::lock_guard lk(mu_);
  return lost_node0_;
}

core::Failure Watch::lost_node0_failure(const std::string& endpoint, const std::string& store_host,
                                        const std::string& why) const {
  core::Failure info;
  info.reason = fmt::format("lost the rendezvous store at {}: {}", endpoint, why);
  {
    std::lock_guard lk(mu_);
    info.host = node0_host_.empty() ? store_host : node0_host_;
  }
  info.node_rank = 0;
  info.exit_code = 1;
  info.lost = true;
  info.time = core::failure_now();
  return info;
}

std::int64_t Watch::longest_gap_ms() const {
  std::lock_guard lk(mu_);
  std::int64_t gap = longest_gap_ms_;
  if (watching_.load() && last_turn_ms_ != 0) gap = std::max(gap, now_ms() - last_turn_ms_);
  return gap;
}

void Watch::clear_round() {
  std::lock_guard lk(mu_);
  fired_ = false;
  lost_node0_.reset();
}

// Each turn of the watch: the time since the last one is time this agent did not run (cut_off).
Millis Watch::turn() {
  const std::int64_t now = now_ms();
  std::lock_guard lk(mu_);
  const std::int64_t gap = now - std::exchange(last_turn_ms_, now);
  longest_gap_ms_ = std::max(longest_gap_ms_, gap);
  return Millis{gap};
}

// A pong every kPongEvery heartbeats, and at every one once node 0 has been quiet that long: node 0
// answers a third of them, and a silent node 0 still shows. False: the connection is gone.
bool Watch::send_heartbeat(TcpStore& conn, const LivenessTiming& t, std::uint64_t& beats) {
  const bool quiet = Clock::now() - conn.last_heard() >= kPongEvery * t.interval;
  return conn.heartbeat(quiet || beats++ % kPongEvery == 0);
}

// The events that came within `wait`: the stacks requests (index 1) go to the StatusBoard, the others,
// returned, are the abort.
std::vector<TcpStore::Event> Watch::events(TcpStore& conn, Millis wait, int wake_fd) {
  std::vector<TcpStore::Event> aborts;
  for (auto& e : conn.poll_events(wait, wake_fd)) {
    if (e.index == 1) {
      status_.keep_stacks_request(std::move(e.value));
    } else {
      aborts.push_back(std::move(e));
    }
  }
  return aborts;
}

// Node 0 silent past node0_timeout. This agent may itself have been stopped: what came meanwhile is read
// before judging (an abort fires, and sets `fired`). True: node 0 is lost, and that fired.
bool Watch::node0_silent(const WatchRound& r, bool& fired) {
  const auto got = events(*r.conn, Millis{0}, -1);
  if (!got.empty()) {
    fire_event(got.front().value);
    fired = true;
    return false;
  }
  if (Clock::now() - r.conn->last_heard() <= r.timing.node0_timeout) return false;
  fire_lost_node0(r, fmt::format("no answer to heartbeats for {} ms", r.timing.node0_timeout.count()));
  return true;
}

// Heartbeats every interval, the abort as a pushed event, and a lost node 0: the connection closed, or
// nothing heard for node0_timeout. Until the watch stops: after the abort too, since this agent's teardown
// may take the whole grace (a trainer that checkpoints on SIGTERM) and a node is lost only when its agent
// is (node 0 would drop a silent one, and an elastic job's next round would go on without a healthy node).
void Watch::loop(const WatchRound& r) {
  auto next_beat = Clock::now();
  // How long the others wait before they declare this agent lost: past it, they went on without it.
  const Millis others_wait = r.serving ? r.timing.node0_timeout : r.timing.agent_timeout;
  // The last turn on the way out (a stopped agent may find its connection gone as it resumes); from then
  // on nothing turns, and cut_off counts no more time.
  struct LastTurn {
    Watch& w;
    ~LastTurn() {
      w.turn();
      std::lock_guard lk(w.mu_);
      w.last_turn_ms_ = 0;
    }
  } last_turn{*this};
  std::uint64_t beats = 0;
  bool fired = false;  // this attempt's cause went out: from here on only the heartbeats matter
  try {
    while (watching_.load()) {
      if (const Millis gap = turn(); gap > others_wait && !fired) {
        fire_cut_off(r, gap, others_wait);
        fired = true;
      }
      if (Clock::now() >= next_beat) {
        if (!send_heartbeat(*r.conn, r.timing, beats)) {
          if (!fired) fire_lost_node0(r, "the connection is gone");
          return;
        }
        next_beat = Clock::now() + r.timing.interval;
      }
      const auto got = events(*r.conn, detail::left_until(next_beat), wake_fd_);
      if (!watching_.load()) return;
      if (fired) continue;
      if (!got.empty()) {
        fire_event(got.front().value);
        fired = true;
        continue;
      }
      // On node 0 the store runs in this very process: a silent store is a busy one (fanning out a plan to
      // thousands of nodes), never a lost one.
      if (!r.serving && Clock::now() - r.conn->last_heard() > r.timing.node0_timeout &&
          node0_silent(r, fired)) {
        return;
      }
    }
  } catch (const store::Error& e) {
    if (watching_.load() && !fired) fire_lost_node0(r, e.what());
  }
}

void Watch::fire_event(const std::string& value) {
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

// This agent did not run for longer than the others wait before they declare it lost (stopped, starved):
// they went on without it. Its own judgement, as a lost node 0 is: nothing of the store says so, and what
// it would hear now (peers gone) tells the wrong story.
void Watch::fire_cut_off(const WatchRound& r, Millis gap, Millis others_wait) {
  core::Failure info;
  info.reason = fmt::format(
      "this node did not run for {:.1f} s (stopped, or starved), longer than the {:.0f} s after which the "
      "others declare it lost: it was cut off from the job",
      std::chrono::duration<double>(gap).count(), std::chrono::duration<double>(others_wait).count());
  info.node_rank = r.node_rank;
  info.exit_code = 1;
  info.time = core::failure_now();
  {
    std::lock_guard lk(mu_);
    info.host = self_host_;
  }
  declare_lost(info, *r.conn);
}

void Watch::fire_lost_node0(const WatchRound& r, const std::string& why) {
  declare_lost(lost_node0_failure(r.endpoint, r.store_host, why), *r.conn);
}

// Keeps `info` as this attempt's own judgement (node0_lost), ends a barrier's wait on this connection,
// which would wait for peers it no longer hears from, and fires.
void Watch::declare_lost(const core::Failure& info, TcpStore& conn) {
  {
    std::lock_guard lk(mu_);
    lost_node0_ = info;
  }
  if (gate_.waiting()) conn.close();
  fire(info);
}

}  // namespace ddprun::rdzv
