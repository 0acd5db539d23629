#include "agent/failure_tracker.hpp"

#include <fmt/format.h>
#include <unistd.h>
#include <exception>
#include <utility>

#include "agent/python_error.hpp"
#include "core/duration.hpp"

namespace ddprun::agent {

namespace {

// A failed worker's last stderr lines usually arrive right after its exit; wait this long at most
// before deciding, so the root cause carries them.
constexpr std::chrono::milliseconds kStderrWait{200};

bool same_failure(const Failure& a, const Failure& b) {
  return a.host == b.host && a.rank == b.rank && a.pid == b.pid && a.node_rank == b.node_rank;
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
                               const Reporter& reporter, std::function<void(const Failure&)> decided)
    : coord_(coord), relay_(relay), reporter_(reporter), decided_(std::move(decided)), stderr_timer_(io) {}

void FailureTracker::worker_failed(const Proc& p) {
  pending_.push_back(&p);
  if (!p.reading(true)) {
    decide();
  } else if (pending_.size() == 1) {
    // The first pending failure's wait also covers any later one: all are decided together.
    stderr_timer_.expires_after(kStderrWait);
    stderr_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) decide();
    });
  }
}

void FailureTracker::stderr_closed(const Proc& p) {
  for (const Proc* q : pending_) {
    if (q == &p) {
      decide();
      return;
    }
  }
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
  if (!local_ || f.time < local_->time) local_ = f;
}

bool FailureTracker::is_echo(const Failure& remote) const {
  return local_ && same_failure(*local_, remote);
}

bool FailureTracker::record_remote(const Failure& f) {
  if (remote_) return false;
  remote_ = f;
  return true;
}

std::optional<Failure> FailureTracker::remote() const {
  if (remote_ && is_echo(*remote_)) return std::nullopt;
  return remote_;
}

void FailureTracker::publish(const Failure& f) const {
  try {
    coord_.publish_failure(f);
  } catch (const std::exception& e) {
    reporter_.warn(fmt::format("could not tell the other nodes about the failure: {}", e.what()));
  }
}

FailureTracker::Outcome FailureTracker::outcome(const std::vector<WorkerExit>& exits) {
  for (const auto& e : exits) {
    if (local_ && local_->rank == e.rank && local_->pid == e.pid) local_->stderr_tail = e.stderr_tail;
  }
  const auto remote_root = remote();
  Outcome o;
  o.root_cause = choose_root_cause(local_, remote_root);
  o.remote_abort = remote_root && o.root_cause && same_failure(*o.root_cause, *remote_root);
  return o;
}

}  // namespace ddprun::agent
