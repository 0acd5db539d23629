#pragma once
// This node's failures and the job's root cause: the first local failure (decided once the failed
// worker's stderr is read, or after a short wait, so it carries its last lines), the root cause
// another node reported, the choice between them, and publishing a local one to the other nodes.
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "agent/coordinator.hpp"
#include "agent/hang_watch.hpp"
#include "agent/output_relay.hpp"
#include "agent/proc.hpp"
#include "agent/reporter.hpp"
#include "agent/result.hpp"

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
  // `decided` gets the first local worker failure, once.
  FailureTracker(boost::asio::io_context& io, Coordinator& coord, const OutputRelay& relay,
                 const Reporter& reporter, std::function<void(const Failure&)> decided);

  // A worker failed before teardown started.
  void worker_failed(const Proc& p);
  void stderr_closed(const Proc& p);
  bool waiting() const { return !pending_.empty(); }  // a failure waits for its stderr

  // The earliest local failure (a worker's, or the agent's own signal) is this node's cause.
  void offer_local(const Failure& f);
  // The root cause another node reported. False for our own failure echoed back by the store.
  bool is_echo(const Failure& remote) const;
  // Keeps the first one; true if it is.
  bool record_remote(const Failure& f);
  bool any() const { return local_.has_value() || remote().has_value(); }

  // Tells the other nodes; a coordinator error is only a warning.
  void publish(const Failure& f) const;

  // The job's root cause as this node sees it, once the run ended (choose_root_cause). The local
  // cause gets every stderr line of its worker, including those read after it was published.
  struct Outcome {
    std::optional<Failure> root_cause;
    bool remote_abort = false;  // the root cause is the one another node reported
  };
  Outcome outcome(const std::vector<WorkerExit>& exits);

 private:
  void decide();
  Failure failure_of(const Proc& p) const;
  std::optional<Failure> remote() const;

  Coordinator& coord_;
  const OutputRelay& relay_;
  const Reporter& reporter_;
  std::function<void(const Failure&)> decided_;
  boost::asio::steady_timer stderr_timer_;
  std::vector<const Proc*> pending_;
  std::optional<Failure> local_;
  std::optional<Failure> remote_;  // held here only: delivered on the loop by asio::post
};

}  // namespace ddprun::agent
