#pragma once
// How one node's supervisor talks to the rest of the job. The application implements it over the
// rendezvous store; LocalCoordinator is the single-node version. Kept free of rendezvous headers
// so the agent can be built and tested on its own.
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/failure.hpp"

namespace ddprun::agent {

using core::Failure;

// One agent's end-of-run record as node rank 0 gathers it (job_summary.hpp encodes the record).
struct PeerRecord {
  int node_rank = 0;  // the agent's place in the plan
  std::string host;
  std::optional<std::string> record;  // nullopt: it did not come in time
};

// What publishing this node's failure told: the job's root cause as the other nodes see it (the
// first failure published in the job: this one, or another node's that came first), or why the
// other nodes could not be told.
struct PublishOutcome {
  std::optional<Failure> root;
  std::string error;  // without a root: why (the store did not answer within the bound, ...)
};

// A cause handed to the supervisor: `from_store` when it is the job's root cause as the store holds
// it; false for one only this node saw (its node 0 lost), which never replaces this node's own failure.
using AbortHandler = std::function<void(const Failure& root, bool from_store)>;

// How the exit barrier ended: without a root, every node got there (the job succeeded); else the
// cause that ended the wait, `from_store` as for the AbortHandler.
struct BarrierOutcome {
  std::optional<Failure> root;
  bool from_store = true;
};

class Coordinator {
 public:
  virtual ~Coordinator() = default;
  // Called at most once a run, off the supervisor's loop (its own thread, or the one that reads the
  // signals at the exit barrier), with this node's first failure (a worker's, a hang, the agent
  // stopped by a signal). Must return within `bound` (plus a
  // little) whatever the other nodes or the store do: the node's teardown and exit never wait for
  // more. The first failure published in the job is the job's root cause.
  virtual PublishOutcome publish_failure(const Failure& f, std::chrono::milliseconds bound) = 0;
  // The supervisor installs a handler at the start of each run and an empty function at its end.
  // The implementation calls it (from any thread) with the job's root cause when another node
  // failed, also when that happened before the handler was installed; calling it with this node's
  // own published failure is harmless. The handler only posts the cause to the supervisor's loop,
  // which keeps it: the implementation keeps no copy. It calls the handler under its own lock, so
  // once set_remote_abort_handler returns, the previous handler is neither running nor called again.
  virtual void set_remote_abort_handler(AbortHandler h) = 0;
  // Called only after every local worker exited 0: waits until the job's outcome is known. No root
  // once every node got there (the job succeeded); otherwise the job's root cause that ended the
  // wait (another node's failure, a lost node or node 0, a node stopped by a signal), which this
  // node then reports as the job's outcome; `from_store` as the abort handler's. No time bound: the
  // implementation's liveness ends the wait for a node that neither finishes nor fails.
  // publish_failure() from another thread meanwhile must not wait for it, and ends it (the agent
  // stopped by a signal at the barrier); when that publication fails, the wait ends too.
  virtual BarrierOutcome exit_barrier() = 0;
  // The job-wide summary (docs/agent.md). Every agent of a multi-agent job publishes its compact
  // record when its run has ended; false when node 0 could not take it, so that
  // this agent prints its full report itself. Bounded (a few seconds) whatever node 0's state.
  virtual bool publish_result(const std::string& record) {
    (void)record;
    return false;
  }
  // Whether anyone can read the status records and send stacks requests (`ddprun top`, `ddprun stacks`,
  // --metrics-port): false for a job without a store (standalone, per-task mode), whose run then starts
  // neither the status thread nor the stacks responder.
  virtual bool observed() const { return false; }
  // `ddprun top` (docs/observe.md): overwrites node `node_rank`'s status record where the job's
  // store keeps it. Called about once a second from the status thread (status_publisher.hpp), beside
  // every other call; must never wait on the other nodes. False: not published this time.
  virtual bool publish_status(int node_rank, const std::string& record) {
    (void)node_rank;
    (void)record;
    return false;
  }
  // `ddprun stacks` (docs/observe.md), from the stacks responder's thread: the latest request the store
  // pushed to this agent (nullopt: none), and the write of this node's answer under `key`. Neither waits on
  // the other nodes (the write, beside a waiting exit barrier, takes a short connection of its own, bounded);
  // false: not written this time.
  virtual std::optional<std::string> stacks_request() { return std::nullopt; }
  virtual bool write_shared(const std::string& key, const std::string& value) {
    (void)key;
    (void)value;
    return false;
  }
  // On node 0 only: every agent's record of this run in plan order, waiting at most `timeout`
  // (less once nobody who could still report is left), and not at all for `lost`, a node known to
  // be gone. Empty: no job-wide view here.
  virtual std::vector<PeerRecord> gather_results(std::chrono::milliseconds timeout, std::optional<int> lost) {
    (void)timeout;
    (void)lost;
    return {};
  }
};

// Installs a remote abort handler for the lifetime of one run; reset() (or the destructor) removes
// it, after which it is neither running nor called again.
class ScopedAbortHandler {
 public:
  ScopedAbortHandler(Coordinator& c, AbortHandler h) : c_(c) { c_.set_remote_abort_handler(std::move(h)); }
  ~ScopedAbortHandler() { reset(); }
  ScopedAbortHandler(const ScopedAbortHandler&) = delete;
  ScopedAbortHandler& operator=(const ScopedAbortHandler&) = delete;
  void reset() {
    if (installed_) c_.set_remote_abort_handler({});
    installed_ = false;
  }

 private:
  Coordinator& c_;
  bool installed_ = true;
};

// A job of one node: nothing to tell anyone; its own first failure is the job's root cause.
class LocalCoordinator : public Coordinator {
 public:
  PublishOutcome publish_failure(const Failure& f, std::chrono::milliseconds) override { return {f, {}}; }
  void set_remote_abort_handler(AbortHandler) override {}
  BarrierOutcome exit_barrier() override { return {}; }
};

}  // namespace ddprun::agent
