#pragma once
// This node's failures and the job's root cause: the first local failure (decided once the failed
// worker's stderr is read, or after a short wait, so it carries its last lines, and not before the
// settle for a late checkpoint signal has passed, policy.hpp), published to the
// other nodes off the loop and bounded; the root cause the store holds (the first failure published,
// from that publication's answer or from another node's abort); and the one rule between them
// (choose_root_cause).
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "agent/coordinator.hpp"
#include "agent/hang_watch.hpp"
#include "agent/result.hpp"
#include "output_relay.hpp"
#include "proc.hpp"

namespace ddprun::agent {

// The record of a worker that could not be started: fatal, since a new attempt would fail the same way.
Failure start_failed(const core::Worker& w, const std::string& host, const std::string& message,
                     int exit_code);
// The agent's own stop by a signal: rank -1 says the agent was stopped, so nobody restarts.
Failure agent_stopped(int sig, const std::string& host, int node_rank);

// The record of a hang declared on this node: the longest-silent rank stands for it (its rank, pid),
// every hung rank is listed with its silence, and the exit code is kHangExitCode.
Failure hang_failure(const std::vector<HungRank>& hung, const Proc& first, std::chrono::milliseconds timeout);

class FailureTracker {
 public:
  // `decided` gets the first local worker failure, once; `published` runs on the loop when the
  // publication of this node's failure has ended (told or not). `bound`: how long a publication may
  // take (Coordinator::publish_failure). `settle`: how long after its exit a worker's failure waits for
  // a checkpoint signal that may still come (0: not at all).
  FailureTracker(boost::asio::io_context& io, Coordinator& coord, const OutputRelay& relay,
                 std::chrono::milliseconds bound, std::chrono::milliseconds settle,
                 std::function<void(const Failure&)> decided, std::function<void()> published);
  ~FailureTracker();
  FailureTracker(const FailureTracker&) = delete;
  FailureTracker& operator=(const FailureTracker&) = delete;

  // A worker failed before teardown started.
  void worker_failed(const Proc& p);
  void stderr_closed(const Proc& p);
  // Decides a failure still waiting for its stderr now (a signal came after it: it was first).
  void settle();
  // A failure waits for its stderr, or this node's publication for the store's answer.
  bool waiting() const { return !pending_.empty() || publishing_; }

  // This node's first failure (a worker's, a hang, the agent's own signal): kept, and published to
  // the other nodes off the loop (at most `bound`). A later one changes nothing.
  void offer_local(const Failure& f);
  // The same while the loop does not run (a command that cannot start): publishes here, bounded.
  void offer_local_now(const Failure& f);
  // Where this node's failures get their step (Failure::step): the highest its ranks reported, read
  // when the failure is kept, before it is published, so every node decides on the same step.
  void set_step_source(std::function<std::optional<std::int64_t>()> step) { step_ = std::move(step); }
  // Our own failure echoed back by the store.
  bool is_echo(const Failure& remote) const;
  // A cause from the coordinator: the store's root cause (`from_store`), or one only this node saw
  // (a lost node 0). True the first time one comes.
  bool record_remote(const Failure& f, bool from_store);
  bool any() const { return local_ || store_root_ || observed_; }
  // Waits for the publication's thread (bounded by `bound`); its answer is then posted to the loop.
  void join();

  // The job's root cause as this node names it everywhere (report, events, error file, exit code).
  // The local cause gets every stderr line of its worker, including those read after it was published.
  struct Outcome {
    std::optional<Failure> root_cause;
    bool remote_abort = false;  // the root cause is another node's
    std::string not_told;       // non-empty: the other nodes could not be told of this node's failure, why
  };
  Outcome outcome(const std::vector<WorkerExit>& exits);

 private:
  void stderr_ready();
  void decide();
  void start_publish(const Failure& f);
  void on_published(const PublishOutcome& o, bool notify);
  Failure failure_of(const Proc& p) const;

  boost::asio::io_context& io_;
  Coordinator& coord_;
  const OutputRelay& relay_;
  std::chrono::milliseconds bound_;
  std::chrono::milliseconds settle_;
  std::chrono::steady_clock::time_point settled_at_{};  // the first pending failure is not decided before
  std::function<void(const Failure&)> decided_;
  std::function<void()> published_;
  std::function<std::optional<std::int64_t>()> step_;
  boost::asio::steady_timer stderr_timer_;
  std::vector<const Proc*> pending_;
  std::optional<Failure> local_;       // this node's first failure
  std::optional<Failure> store_root_;  // the job's root cause as the store holds it
  std::optional<Failure> observed_;    // a cause only this node saw (a lost node 0)
  std::string not_told_;
  bool remote_seen_ = false;  // a cause came from the coordinator
  bool publishing_ = false;
  std::thread publisher_;
};

}  // namespace ddprun::agent
