#include "failure_tracker.hpp"

#include <fmt/format.h>
#include <unistd.h>
#include <algorithm>
#include <boost/asio/post.hpp>
#include <exception>
#include <utility>

#include "agent/python_error.hpp"
#include "core/duration.hpp"

namespace ddprun::agent {

namespace {

// A failed worker's last stderr lines usually arrive right after its exit; wait this long at most
// before deciding, so the root cause carries them.
constexpr std::chrono::milliseconds kStderrWait{200};

PublishOutcome publish_bounded(Coordinator& coord, const Failure& f, std::chrono::milliseconds bound) {
  try {
    return coord.publish_failure(f, bound);
  } catch (const std::exception& e) {
    return {std::nullopt, e.what()};
  }
}

}  // namespace

Failure start_failed(const core::Worker& w, const std::string& host, const std::string& message,
                     int exit_code) {
  Failure f;
  f.host = w.host.value_or(host);
  f.node_rank = w.node_rank;
  f.rank = w.rank;
  f.local_rank = w.local_rank;
  f.exit_code = exit_code;
  f.reason = "cannot start: " + message;
  f.fatal = true;  // every node stops
  f.time = core::failure_now();
  return f;
}

Failure agent_stopped(int sig, const std::string& host, int node_rank) {
  Failure f;
  f.host = host;
  f.node_rank = node_rank;
  f.exit_code = 128 + sig;
  f.signal = sig;
  f.pid = ::getpid();
  f.reason = fmt::format("ddprun on {} received {}", host, signal_name(sig));
  f.time = core::failure_now();
  return f;
}

Failure hang_failure(const std::vector<HungRank>& hung, const Proc& first,
                     std::chrono::milliseconds timeout) {
  Failure f;
  f.host = first.host();
  f.node_rank = first.worker().node_rank;
  f.rank = first.worker().rank;
  f.local_rank = first.worker().local_rank;
  f.pid = first.pid();
  f.exit_code = core::kHangExitCode;
  f.hang = true;
  std::string ranks;
  for (const auto& h : hung) {
    f.silent.push_back({h.rank, core::seconds(h.silent)});
    ranks += fmt::format("{}{} ({:.1f} s)", ranks.empty() ? "" : ", ", h.rank, core::seconds(h.silent));
  }
  f.reason = fmt::format("hung: no output or heartbeat for --hang-timeout {:g} s; silent rank{} {}",
                         core::seconds(timeout), hung.size() == 1 ? "" : "s", ranks);
  f.time = core::failure_now();
  return f;
}

FailureTracker::FailureTracker(boost::asio::io_context& io, Coordinator& coord, const OutputRelay& relay,
                               std::chrono::milliseconds bound, std::chrono::milliseconds settle,
                               std::function<void(const Failure&)> decided, std::function<void()> published)
    : io_(io),
      coord_(coord),
      relay_(relay),
      bound_(bound),
      settle_(settle),
      decided_(std::move(decided)),
      published_(std::move(published)),
      stderr_timer_(io) {}

FailureTracker::~FailureTracker() {
  join();
}

void FailureTracker::worker_failed(const Proc& p) {
  pending_.push_back(&p);
  if (pending_.size() == 1) {
    // The first pending failure's wait also covers any later one: all are decided together. A worker
    // that ended on a checkpoint signal needs no settle: the signal is known.
    settled_at_ = p.end.after_signal != 0 ? p.end.ended : p.end.ended + settle_;
    stderr_timer_.expires_at(std::max(std::chrono::steady_clock::now() + kStderrWait, settled_at_));
    stderr_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) decide();
    });
  }
  if (!p.reading(true)) stderr_ready();
}

void FailureTracker::stderr_closed(const Proc& p) {
  for (const Proc* q : pending_) {
    if (q == &p) {
      stderr_ready();
      return;
    }
  }
}

// The stderr is read: decided now, or once the settle is over (the timer then waits for that instead).
void FailureTracker::stderr_ready() {
  if (std::chrono::steady_clock::now() >= settled_at_) {
    decide();
    return;
  }
  stderr_timer_.expires_at(settled_at_);
  stderr_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) decide();
  });
}

void FailureTracker::settle() {
  if (!pending_.empty()) decide();
}

void FailureTracker::decide() {
  const Proc* first = nullptr;
  for (const Proc* p : pending_) {
    if (first == nullptr || p->end.time < first->end.time) first = p;
  }
  pending_.clear();
  stderr_timer_.cancel();
  if (first == nullptr) return;
  const Failure f = failure_of(*first);
  offer_local(f);
  decided_(f);
}

Failure FailureTracker::failure_of(const Proc& p) const {
  Failure f;
  f.host = p.host();
  f.node_rank = p.worker().node_rank;
  f.rank = p.worker().rank;
  f.local_rank = p.worker().local_rank;
  f.exit_code = p.end.status.exit_code;
  f.signal = p.end.status.signal;
  f.pid = p.pid();
  f.reason = describe_exit(p.end.status);
  f.time = p.end.time;
  f.stderr_tail = relay_.stderr_tail(p.index());
  f.after_signal = p.end.after_signal;
  // Read once the worker ended: @record writes the file before the exception leaves Python.
  if (const auto py = p.error_file.empty() ? std::nullopt : read_python_error(p.error_file)) {
    f.error_message = py->message;
    f.traceback = py->traceback;
  }
  return f;
}

void FailureTracker::offer_local(const Failure& f) {
  if (local_) return;
  local_ = f;
  if (!local_->step && step_) local_->step = step_();
  start_publish(*local_);
}

void FailureTracker::offer_local_now(const Failure& f) {
  if (local_) return;
  local_ = f;
  if (!local_->step && step_) local_->step = step_();
  on_published(publish_bounded(coord_, *local_, bound_), false);
}

// Off the loop: a node 0 that is stopped, unreachable or slow holds up neither this node's teardown
// nor its exit; the answer comes back to the loop.
void FailureTracker::start_publish(const Failure& f) {
  publishing_ = true;
  publisher_ = std::thread([this, f] {
    PublishOutcome o = publish_bounded(coord_, f, bound_);
    boost::asio::post(io_, [this, o = std::move(o)] { on_published(o, true); });
  });
}

void FailureTracker::join() {
  if (publisher_.joinable()) publisher_.join();
}

void FailureTracker::on_published(const PublishOutcome& o, bool notify) {
  publishing_ = false;
  if (o.root && !store_root_) store_root_ = o.root;
  if (!o.root) not_told_ = o.error.empty() ? std::string("no answer") : o.error;
  if (notify && published_) published_();
}

bool FailureTracker::is_echo(const Failure& remote) const {
  return local_ && same_failure(*local_, remote);
}

bool FailureTracker::record_remote(const Failure& f, bool from_store) {
  if (from_store && !store_root_) store_root_ = f;
  if (!from_store && !observed_) observed_ = f;
  return !std::exchange(remote_seen_, true);
}

FailureTracker::Outcome FailureTracker::outcome(const std::vector<WorkerExit>& exits) {
  for (const auto& e : exits) {
    if (local_ && local_->rank == e.rank && local_->pid == e.pid) local_->stderr_tail = e.stderr_tail;
  }
  Outcome o;
  o.root_cause = choose_root_cause(store_root_, local_, observed_);
  o.remote_abort = o.root_cause && !(local_ && same_failure(*o.root_cause, *local_));
  // Only this node's own failure needed telling; another node's was published by that node.
  if (local_ && !store_root_) o.not_told = not_told_;
  return o;
}

}  // namespace ddprun::agent
