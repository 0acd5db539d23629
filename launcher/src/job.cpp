#include "launcher/job.hpp"

#include <csignal>
#include <cstdlib>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "agent/attempt_context.hpp"
#include "agent/error.hpp"
#include "agent/events.hpp"
#include "agent/signals.hpp"
#include "agent/supervisor.hpp"
#include "agent/topology.hpp"
#include "core/elastic.hpp"
#include "core/error.hpp"
#include "core/json.hpp"
#include "core/plan_table.hpp"
#include "core/worker_store.hpp"
#include "launcher/auth_setup.hpp"
#include "launcher/dry_run.hpp"
#include "launcher/health_check.hpp"
#include "launcher/self_launch.hpp"
#include "launcher/system.hpp"
#include "membership_report.hpp"
#include "per_task_session.hpp"
#include "rendezvous/rendezvous.hpp"
#include "session.hpp"
#include "session_common.hpp"
#include "store/error.hpp"
#include "store_coordinator.hpp"
#include "worker_store.hpp"

namespace ddprun::launcher {

namespace {

using core::Failure;

// Standalone: the one-node case.
class LocalSession final : public Session {
 public:
  LocalSession(const core::Resolved& r, agent::Events& ev)
      : r_(r), store_(worker_store_log(ev), r.legacy_clients_21) {}

  Round join(int attempt) override {
    core::JobSpec job = r_.job;
    job.restart_count = attempt;
    job.master_port = store_.master_port(job, 0, r_.master_port_given, false, {});
    Round round;
    round.table = std::make_shared<const core::PlanTable>(core::make_plan_table(job, r_.nodes));
    round.local = core::derive_workers(*round.table, job.node_rank, core::task_slot(job));
    round.announce = true;  // one worker too, as under srun: the run says where it runs before it starts
    return round;
  }
  agent::Coordinator& coordinator() override { return coord_; }
  void next_attempt(const std::optional<core::Failure>&) override {}

 private:
  const core::Resolved& r_;
  agent::LocalCoordinator coord_;
  WorkerStoreHost store_;
};

}  // namespace

namespace {

nlohmann::json plan_event(const core::JobConstants& plan, int attempt) {
  return {{"attempt", attempt},
          {"run_id", plan.run_id},
          {"world_size", plan.world_size},
          {"nnodes", plan.nnodes},
          {"master_addr", plan.master_addr},
          {"master_port", plan.master_port},
          {"mode", core::to_string(plan.mode)}};
}

// MASTER_ADDR / MASTER_PORT already in ddprun's environment (say, from an outer script) are replaced in
// the workers' by the plan's: one warning naming both, once, where workers start.
void warn_replaced_master_env(agent::Events& ev, const core::JobConstants& plan) {
  const char* addr = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  const std::string plan_port = std::to_string(plan.master_port);
  const bool addr_replaced = addr != nullptr && plan.master_addr != addr;
  const bool port_replaced = port != nullptr && plan_port != port;
  if (!addr_replaced && !port_replaced) return;
  std::string from;
  std::string to;
  if (addr_replaced) {
    from = fmt::format("MASTER_ADDR={}", addr);
    to = fmt::format("MASTER_ADDR={}", plan.master_addr);
  }
  if (port_replaced) {
    from += fmt::format("{}MASTER_PORT={}", from.empty() ? "" : " ", port);
    to += fmt::format("{}MASTER_PORT={}", to.empty() ? "" : " ", plan_port);
  }
  ev.warn(
      fmt::format("{} from the environment replaced by {} for the workers; pass --master-addr / "
                  "--master-port to choose them",
                  from, to));
}

// The round's warnings and event now; the text startup table is returned to be printed once this
// node's workers started (a command that cannot start is then one line: no table before it).
std::function<void()> announce(agent::Events& ev, const core::Options& o, const Round& round, int attempt) {
  if (attempt == 0 && !round.local.empty()) warn_replaced_master_env(ev, round.table->job);
  if (ev.json()) {
    auto e = plan_event(round.table->job, attempt);
    if (!round.store_endpoint.empty()) e["rendezvous_endpoint"] = round.store_endpoint;
    ev.emit("rendezvous_joined", e);
    return {};
  }
  if (!round.announce || o.quiet) return {};
  // The store's place, where `ddprun top` and `ddprun stacks` read the job (docs/observe.md).
  const std::string store =
      round.store_endpoint.empty()
          ? std::string()
          : fmt::format(
                "ddprun: rendezvous store {}, run id '{}': ddprun top and ddprun stacks read the job there\n",
                round.store_endpoint, round.store_run_id);
  return [table = round.table, attempt, store] {
    fmt::print(stderr, "{}{}", render_startup_table(*table, attempt), store);
  };
}

void restarting(agent::Events& ev, int attempt, int code, int max_restarts) {
  if (ev.json()) {
    ev.emit("restart", {{"failed_attempt", attempt}, {"exit_code", code}, {"max_restarts", max_restarts}});
  } else {
    fmt::print(stderr, "ddprun: attempt {} failed (exit {}); restarting ({} of {})\n", attempt, code,
               attempt + 1, max_restarts);
  }
}

// Test hook (tests/e2e): raises this signal number in the agent the moment a run has ended, the
// narrowest place for srun's --kill-on-bad-exit TERM to land.
void raise_test_signal() {
  if (const char* sig = std::getenv("DDPRUN_TEST_RAISE_AFTER_RUN")) ::raise(std::atoi(sig));
}

// The last line; the stopping signals stay held (hold_stop_signals) up to the exit itself, so a TERM
// now (srun's --kill-on-bad-exit, once another node exited with the root cause) cannot turn the
// root cause's exit code into 143.
int finished(agent::Events& ev, int code, const std::vector<AttemptRecord>& attempts = {}) {
  if (ev.json()) {
    nlohmann::json e = {{"exit_code", code}, {"success", code == 0}};
    if (!attempts.empty()) e["attempts"] = attempts_json(attempts);
    ev.emit("job_finished", e);
  }
  return code;
}

// The job's last line on the node that announces the rounds: every attempt, when there were several. The
// error file of this node's last run gets the job's own code.
int finished_attempts(agent::Events& ev, const core::Options& o, const Round& round, int code,
                      const std::vector<AttemptRecord>& attempts, const agent::AgentOptions& ao,
                      const agent::AttemptContext& last) {
  if (!round.local.empty()) agent::record_job_exit(ao, last, round.local.front().node_rank, code);
  if (!ev.json() && round.announce && !o.quiet) fmt::print(stderr, "{}", attempts_line(attempts));
  return finished(ev, code, attempts);
}

// --cpu-bind: this node's workers of the agreed plan, on this machine's topology and affinity.
void bind_cpus(agent::Events& ev, const core::Resolved& r, Round& round, int attempt) {
  const auto warning = agent::bind_workers(r.cpu_bind, r.job.user_omp_num_threads.has_value(), round.local);
  if (warning && attempt == 0) ev.warn(*warning);
}

// The job ended before this node had a place in a round (it came late, or its health check outlasted the
// job): it leaves with the job's code, as a standby does.
int ended_before_a_place(agent::Events& ev, const core::Resolved& r, int code) {
  const std::string line = fmt::format(
      "the job ended with exit code {} before this node (node rank {}) had a place in a round; it leaves",
      code, r.job.node_rank);
  if (ev.json()) {
    ev.emit("rendezvous_waiting", {{"message", line}});
  } else {
    fmt::print(stderr, "ddprun: {}\n", line);
  }
  return finished(ev, code);
}

// One error line (or the error event) without ending the JSON stream.
void fail_line(agent::Events& ev, const std::string& what, int code) {
  if (ev.json()) {
    ev.emit("error", {{"message", what}, {"exit_code", code}});
  } else {
    fmt::print(stderr, "ddprun: error: {}\n", what);
  }
}

// An attempt's end as the attempts loop sees it.
struct AttemptEnd {
  agent::AttemptDecision decision;
  std::optional<Failure> root;
  int stop = 0;  // a stopping signal the run got (after another root cause: after_stop weighs it)
};

// The restart rule after a run, with the run's step recorded in `progress` (its root cause's: the same
// record, so the same step, on every node; a lost node's attempt records none, agent::record_attempt).
AttemptEnd decide(const agent::RunResult& res, int attempt, int max_restarts, agent::ProgressRule& progress) {
  progress.history = agent::record_attempt(progress.history, res.root_cause, attempt);
  return {agent::after_attempt(res, attempt, max_restarts, progress), res.root_cause,
          res.stopped_by_signal ? res.signal : 0};
}

// A stop that cancelled a restart (scancel, a time limit, Ctrl-C while a failed attempt ends): one line
// on every node, since each exits with it.
void restart_cancelled(agent::Events& ev, int sig, int attempt, int attempt_code) {
  if (ev.json()) {
    ev.emit("signal_received", {{"signal", core::signal_name(sig)},
                                {"action", "stop"},
                                {"restart_cancelled", true},
                                {"exit_code", 128 + sig}});
  } else {
    fmt::print(stderr, "ddprun: {} received: attempt {} (exit {}) is not restarted; exit code {}\n",
               core::signal_name(sig), attempt, attempt_code, 128 + sig);
  }
}

// A standby (elastic): no workers; it waits for the active nodes to finish or for the root cause.
AttemptEnd stand_by(Session& session, int attempt, int max_restarts, agent::ProgressRule& progress) {
  const auto root = session.standby([] { return agent::held_stop_signal() != 0; });
  return decide(agent::standby_result(root, agent::held_stop_signal()), attempt, max_restarts, progress);
}

// What this attempt tells its run, besides the options: built afresh for each attempt.
agent::AttemptContext attempt_context(const Round& round, int attempt, const agent::StepHistory& steps,
                                      int elastic_events, std::function<void()> on_started) {
  const core::JobConstants& job = round.table->job;
  agent::AttemptContext c;
  c.attempt = attempt;
  c.steps = steps;
  c.elastic_events = elastic_events;
  c.plan_nodes = job.nnodes;
  c.agents = job.mode == core::Mode::per_task ? job.world_size : job.nnodes;
  c.on_started = std::move(on_started);
  return c;
}

AttemptEnd run_round(Session& session, const Round& round, const agent::AgentOptions& ao,
                     const agent::AttemptContext& ctx, agent::Events& ev, int max_restarts,
                     agent::ProgressRule& progress) {
  const int world_size = round.table->job.world_size;
  const agent::RunResult res =
      agent::run_workers(round.local, world_size, ao, ctx, session.coordinator(), &ev);
  raise_test_signal();
  // The run named the job's root cause once (the store's); its code is the exit code on every node.
  return decide(res, ctx.attempt, max_restarts, progress);
}

// --health-check before the round of `attempt` (main ran the first one, unless the session does): the
// exit code when this node failed it, or when a stop came meanwhile. A failed node leaves without joining;
// a fail-fast job's other nodes leave with its line at once, an elastic job goes on without it
// (docs/agent.md, "Health check"). A check that the job's end interrupted lets the join say so.
std::optional<int> check_before_round(Session& session, const core::Options& o, const core::Resolved& r,
                                      agent::Events& ev, int attempt,
                                      const std::vector<AttemptRecord>& attempts) {
  if (attempt == 0 && !session.checks_first_round()) return std::nullopt;
  if (o.health_check) session.before_check(attempt);
  const NodeHealth health = check_node_health(o, r, [&session] { return session.check_interrupted(); });
  if (health.stopped != 0) {
    // Before the first round: as a stop before it, 128 + signal, nothing left. Before a restart's: the
    // restart was due, and a stop ends the job as it would have ended the run. Node 0 tells the agents
    // that wait for a round.
    if (!attempts.empty()) {
      restart_cancelled(ev, health.stopped, attempts.back().attempt, attempts.back().exit_code);
    }
    session.finish(128 + health.stopped);
    return finished(ev, 128 + health.stopped, attempts);
  }
  const auto& bad = health.failure;
  if (!bad) return std::nullopt;
  fail_line(ev, *bad, kHealthCheckExitCode);
  session.fail_start(start_failure(r, *bad, kHealthCheckExitCode));
  return kHealthCheckExitCode;
}

// The one attempts loop: join, run (or stand by), then restart or exit by agent::after_attempt.
int run_attempts(Session& session, const core::Options& o, const core::Resolved& r,
                 const agent::AgentOptions& ao, agent::Events& ev) {
  const int max_restarts = r.job.max_restarts;
  agent::ProgressRule progress{ao.max_restarts_without_progress, {}};
  std::vector<AttemptRecord> attempts;
  int elastic_events = 0;  // rounds whose size differed from the round before (`ddprun top`)
  for (int attempt = 0;; ++attempt) {
    if (const auto code = check_before_round(session, o, r, ev, attempt, attempts)) return *code;
    Round round = session.join(attempt);
    if (round.ended) return ended_before_a_place(ev, r, *round.ended);
    attempt = std::max(attempt, round.attempt);  // a standby that came late joined a later round
    bind_cpus(ev, r, round, attempt);
    if (!attempts.empty() && attempts.back().world_size != round.table->job.world_size) ++elastic_events;
    const agent::AttemptContext ctx =
        attempt_context(round, attempt, progress.history, elastic_events, announce(ev, o, round, attempt));
    if (round.standby && ctx.on_started) ctx.on_started();  // runs no workers
    // From the run until the exit no stopping signal kills the agent: the run handles it, and after
    // the run, when the outcome is decided, it can only cancel a restart (docs/agent.md, Signals).
    agent::hold_stop_signals();
    const AttemptEnd end = round.standby ? stand_by(session, attempt, max_restarts, progress)
                                         : run_round(session, round, ao, ctx, ev, max_restarts, progress);
    agent::AttemptDecision d = end.decision;
    attempts.push_back({attempt, round.table->job.world_size, d.exit_code, end.root ? end.root->reason : ""});
    // This node did not run for so long that the others went on without it (docs/elastic.md, "A node
    // cut off"): it follows the job as a late standby, or leaves with the job's code when it can tell.
    if (d.restart || d.exit_code != 0) {
      if (const auto cut = session.after_cut_off()) {
        if (!cut->follow) return finished(ev, cut->exit_code);
        // Following the job is this node's restart: a stop during the run or since cancels it.
        const int stop = end.stop != 0 ? end.stop : agent::release_stop_signals();
        if (stop == 0) continue;
        restart_cancelled(ev, stop, attempt, d.exit_code);
        return finished(ev, 128 + stop, attempts);
      }
    }
    // A lost node: the survivors go on only in an elastic job with enough of them (docs/elastic.md);
    // a fail-fast job says so, restarts left or not.
    if (const auto why = session.prepare_restart(end.root, d.restart)) {
      fail_line(ev, *why, d.exit_code);
      session.finish(d.exit_code);
      return finished_attempts(ev, o, round, d.exit_code, attempts, ao, ctx);
    }
    // A stop during the run or since (the hold) ends a job that would restart, with 128 + signal; the
    // next rendezvous runs without the hold (a stop then ends the agent at once, as before the first).
    const int stop = end.stop != 0 || !d.restart ? end.stop : agent::release_stop_signals();
    if (stop != 0 && d.restart) restart_cancelled(ev, stop, attempt, d.exit_code);
    d = agent::after_stop(d, stop);
    if (d.no_progress) fail_line(ev, agent::no_progress_line(progress), d.exit_code);
    if (!d.restart) {
      session.finish(d.exit_code);
      return finished_attempts(ev, o, round, d.exit_code, attempts, ao, ctx);
    }
    restarting(ev, attempt, d.exit_code, max_restarts);
    session.next_attempt(end.root);
  }
}

}  // namespace

int run_job(const core::Options& o, core::Resolved r, const agent::AgentOptions& ao) {
  agent::Events ev(o.log_format == "json" ? agent::LogFormat::json : agent::LogFormat::text);
  ev.set_context(r.self.host.value_or("localhost"), r.job.node_rank);
  auto fail = [&](const std::string& what, int code) {
    fail_line(ev, what, code);
    return finished(ev, code);  // job_finished stays the last JSON line, failures included
  };
  try {
    store::auth::Config auth = resolve_auth(r, o.quiet, ev);
    if (r.elastic && r.job.node_rank == 0) {
      if (const auto none = core::survives_no_loss(r.nagents, r.nnodes_min)) ev.warn(*none);
    }
    std::unique_ptr<Session> session;
    if (o.metrics_port && r.mode == core::Mode::per_task) {
      ev.warn(
          "--metrics-port: per-task mode (srun started several ddpruns per node, each one worker) publishes "
          "no status, so no metrics are served; run one ddprun per node (srun --ntasks-per-node=1) with "
          "--nproc-per-node for them");
    } else if (o.metrics_port && r.mode != core::Mode::agent) {
      ev.warn(
          "--metrics-port is served by agents that meet at a rendezvous store (one agent per node); "
          "this launch has none, so no metrics are served: give --rdzv-endpoint");
    }
    if (r.mode == core::Mode::standalone) {
      session = std::make_unique<LocalSession>(r, ev);
    } else if (r.mode == core::Mode::per_task) {
      session = make_per_task_session(o, r, std::move(auth), ev);
    } else {
      session = make_rendezvous_session(o, r, std::move(auth), ev);
      // The rendezvous replaces the assumed layout with the nodes that join, and the session took the
      // expected host names from it: 16,384 assumed nodes need not stay for the whole job.
      std::vector<core::NodeSpec>().swap(r.nodes);
    }
    return run_attempts(*session, o, r, ao, ev);
  } catch (const store::Error& e) {
    return fail(e.what(), 1);
  } catch (const core::Error& e) {
    return fail(e.what(), e.exit_code());
  } catch (const agent::Error& e) {
    return fail(e.what(), e.exit_code());
  }
}

}  // namespace ddprun::launcher
