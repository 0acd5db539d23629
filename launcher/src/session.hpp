#pragma once
// How one node meets the others for each attempt (job.cpp's attempts loop). Private to the launcher.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/coordinator.hpp"
#include "agent/events.hpp"
#include "core/config.hpp"
#include "core/failure.hpp"
#include "core/plan.hpp"
#include "core/plan_table.hpp"
#include "rendezvous/rendezvous.hpp"

namespace ddprun::launcher {

// One attempt's membership: the agreed plan (job constants and node table) and the workers this
// node runs, derived here from it.
struct Round {
  std::shared_ptr<const core::PlanTable> table;  // never null unless `ended`; the session may keep it
  std::vector<core::Worker> local;
  bool announce = false;  // this node prints the startup table
  bool standby = false;   // elastic: this node is a standby and runs no workers
  int attempt = 0;        // the round's attempt: an agent that came late joined a later one
  // The job ended before this node had a place in a round (a standby that came late, an agent whose
  // health check outlasted the job): the job's exit code; nothing else is set.
  std::optional<int> ended;
  // The job's rendezvous store, "HOST:PORT" and the run id it serves, named in the startup lines
  // (where `ddprun top` and `stacks` read the job); empty where they cannot (standalone, per-task mode).
  std::string store_endpoint;
  std::string store_run_id;
};

class Session {
 public:
  virtual ~Session() = default;
  virtual Round join(int attempt) = 0;
  virtual agent::Coordinator& coordinator() = 0;
  // Before a restart's round; `root`: the attempt's root cause (a lost node's tells who is gone).
  virtual void next_attempt(const std::optional<core::Failure>& root) = 0;
  // Elastic (docs/elastic.md): a standby waits for the attempt's end instead of running workers.
  // nullopt: the job finished (or `stop` said so); else the attempt's root cause.
  virtual std::optional<core::Failure> standby(const std::function<bool()>& stop) {
    (void)stop;
    return std::nullopt;
  }
  // This node cannot join the next round (a failed --health-check): tell the others where they would wait
  // for it. A fail-fast job ends on every node with its line; an elastic one goes on without it.
  virtual void fail_start(const core::Failure& cause) { (void)cause; }
  // Whether this session runs the first round's --health-check itself (agent mode: beside the store, so
  // that a check that outlasts the job learns of its end); otherwise main runs it before the session.
  virtual bool checks_first_round() const { return false; }
  // While this node's --health-check runs before the round of `attempt`: check_interrupted() says, without
  // waiting, whether the job ended or the round failed meanwhile (the join then says which).
  virtual void before_check(int attempt) { (void)attempt; }
  virtual bool check_interrupted() { return false; }
  // The job ends with `code` on this node: node 0 tells the agents that wait for a round.
  virtual void finish(int code) { (void)code; }
  // After a failed attempt: whether this node was cut off (it did not run for longer than the others wait
  // before they declare it lost, so they went on without it); the session has said so. nullopt: it was
  // not. Else it follows the job as a standby that came late (the attempts loop goes on), or leaves with
  // `exit_code` (the job's, when it could learn it).
  struct CutOff {
    bool follow = false;
    int exit_code = 1;
  };
  virtual std::optional<CutOff> after_cut_off() { return std::nullopt; }
  // After an attempt that ended with `root` (`restart_due`: after_attempt would restart): nullopt when
  // the next round may run, or the job ends for another reason; else why a lost node ends the job
  // here (core::loss_ends_job: the job is not elastic, fewer than MIN left, no strict majority).
  virtual std::optional<std::string> prepare_restart(const std::optional<core::Failure>& root,
                                                     bool restart_due) {
    (void)root;
    (void)restart_due;
    return std::nullopt;
  }
};

// Agent mode's rendezvous options: the common ones, the store's endpoint, the node counts.
rdzv::RendezvousOptions agent_rdzv_options(const core::Options& o, const core::Resolved& r,
                                           store::auth::Config auth, agent::Events& ev);

std::unique_ptr<Session> make_rendezvous_session(const core::Options& o, const core::Resolved& r,
                                                 store::auth::Config auth, agent::Events& ev);

}  // namespace ddprun::launcher
