// The one restart rule (agent::after_attempt), the same for standalone and multi-node jobs.
#include <catch2/catch.hpp>
#include <csignal>

#include "agent/result.hpp"

using namespace ddprun::agent;

namespace {
Failure worker_failure(int rank, int code) {
  Failure f;
  f.rank = rank;
  f.exit_code = code;
  return f;
}
RunResult failed(int code) {
  RunResult r;
  r.exit_code = code;
  r.root_cause = worker_failure(0, code);
  return r;
}
}  // namespace

TEST_CASE("after_attempt: success exits 0 and never restarts") {
  RunResult r;
  r.success = true;
  const auto d = after_attempt(r, 0, 3);
  CHECK_FALSE(d.restart);
  CHECK(d.exit_code == 0);
}

TEST_CASE("after_attempt: a failure restarts while restarts are left, then exits with its code") {
  CHECK(after_attempt(failed(3), 0, 2).restart);
  CHECK(after_attempt(failed(3), 1, 2).restart);
  const auto last = after_attempt(failed(3), 2, 2);
  CHECK_FALSE(last.restart);
  CHECK(last.exit_code == 3);
  CHECK_FALSE(after_attempt(failed(3), 0, 0).restart);
}

TEST_CASE("after_attempt: a node torn down for another node's failure exits with that root cause's code") {
  // The run named the job's root cause once (the store's): its code is the run's.
  RunResult torn_down;
  torn_down.remote_abort = true;
  torn_down.root_cause = worker_failure(7, 7);
  torn_down.exit_code = job_exit_code(torn_down.root_cause, 0, {{143, SIGTERM}});
  const auto d = after_attempt(torn_down, 0, 0);
  CHECK(d.exit_code == 7);
}

TEST_CASE("after_attempt: a command that cannot start is never restarted, here or elsewhere") {
  RunResult here = failed(127);
  here.spawn_failed = true;
  CHECK_FALSE(after_attempt(here, 0, 5).restart);
  // Another node's spawn failure reaches this node as the job's fatal root cause.
  RunResult elsewhere = failed(127);
  elsewhere.root_cause = worker_failure(4, 127);
  elsewhere.root_cause->fatal = true;
  const auto d = after_attempt(elsewhere, 0, 5);
  CHECK_FALSE(d.restart);
  CHECK(d.exit_code == 127);
}

TEST_CASE("after_attempt: an agent stopped by a signal ends the job with its root cause's code") {
  RunResult r;
  r.exit_code = 128 + SIGTERM;
  r.stopped_by_signal = true;
  r.signal = SIGTERM;
  const auto d = after_attempt(r, 0, 5);
  CHECK_FALSE(d.restart);
  CHECK(d.exit_code == 143);
  // A worker that failed first somewhere is the job's root cause: the rule weighs that failure, and
  // after_stop the signal that came after it.
  r.root_cause = worker_failure(2, 9);
  r.exit_code = job_exit_code(r.root_cause, SIGTERM, {});
  CHECK(after_attempt(r, 0, 5).exit_code == 9);
  CHECK(after_attempt(r, 0, 5).restart);
  CHECK_FALSE(after_stop(after_attempt(r, 0, 5), r.signal).restart);
  // A remote agent's stop ends this node's job too.
  Failure stopped_elsewhere;
  stopped_elsewhere.rank = -1;
  stopped_elsewhere.signal = SIGTERM;
  stopped_elsewhere.exit_code = 143;
  RunResult torn_down = failed(143);
  torn_down.root_cause = stopped_elsewhere;
  CHECK_FALSE(after_attempt(torn_down, 0, 5).restart);
}

TEST_CASE("after_attempt: a failure never exits 0") {
  RunResult r;
  r.exit_code = 0;  // e.g. workers all exited 0 but the job was aborted elsewhere with no code
  r.root_cause = worker_failure(1, 0);
  CHECK(after_attempt(r, 0, 0).exit_code == 1);
}

TEST_CASE("after_attempt: a stop after a checkpoint signal is never restarted, here or elsewhere") {
  RunResult here = failed(140);
  here.root_cause->after_signal = SIGUSR2;
  const auto d = after_attempt(here, 0, 5);
  CHECK_FALSE(d.restart);
  CHECK(d.exit_code == 140);
  // Another node's rank stopped on request first: its record says so, and every node agrees.
  RunResult elsewhere = failed(140);
  elsewhere.root_cause = worker_failure(3, 140);
  elsewhere.root_cause->after_signal = SIGUSR2;
  CHECK_FALSE(after_attempt(elsewhere, 0, 5).restart);
  CHECK(after_attempt(elsewhere, 0, 5).exit_code == 140);
}

TEST_CASE("after_attempt: a standby follows the same rule") {
  struct Row {
    std::optional<Failure> root;
    int held;
    int attempt;
    bool want_restart;
    int want_code;
  };
  Failure fatal = worker_failure(4, 127);
  fatal.fatal = true;
  const Row rows[] = {
      {std::nullopt, 0, 0, false, 0},                  // the active nodes finished
      {worker_failure(1, 7), 0, 0, true, 7},           // a failure: restart while restarts are left
      {worker_failure(1, 7), 0, 2, false, 7},          // ... then exit with its code
      {worker_failure(1, 0), 0, 2, false, 1},          // never 0 for a failure
      {fatal, 0, 0, false, 127},                       // a command that cannot start ends the job
      {worker_failure(1, 7), SIGTERM, 0, false, 143},  // the standby itself was stopped
      {std::nullopt, SIGINT, 0, false, 130},
  };
  for (const auto& r : rows) {
    INFO("root " << (r.root ? r.root->exit_code : -1) << " held " << r.held << " attempt " << r.attempt);
    const auto d = after_attempt(standby_result(r.root, r.held), r.attempt, 2);
    CHECK(d.restart == r.want_restart);
    CHECK(d.exit_code == r.want_code);
  }
}

TEST_CASE("after_stop: a stop cancels a due restart with 128 + signal and keeps a decided code") {
  struct Row {
    bool restart;
    int code;
    int stop;
    bool want_restart;
    int want_code;
  };
  const Row rows[] = {
      {true, 7, 0, true, 7},              // nothing came: restart
      {true, 7, SIGTERM, false, 143},     // scancel while the failed attempt ends or before its restart
      {true, 7, SIGINT, false, 130},      // Ctrl-C alike
      {false, 7, SIGTERM, false, 7},      // srun's TERM after the last attempt: the code stands
      {false, 123, SIGTERM, false, 123},  // stopped without progress: decided
      {false, 0, SIGINT, false, 0},       // a success stays a success
  };
  for (const auto& r : rows) {
    INFO("restart " << r.restart << " code " << r.code << " stop " << r.stop);
    const auto d = after_stop(AttemptDecision{r.restart, r.code}, r.stop);
    CHECK(d.restart == r.want_restart);
    CHECK(d.exit_code == r.want_code);
  }
}

TEST_CASE("stop_is_cause: a signal is reported as the cause only when no other cause came first") {
  Failure stop;  // an agent stopped by SIGTERM (here, or on another node: scancel signals them all)
  stop.signal = SIGTERM;
  stop.exit_code = 143;
  Failure hang = worker_failure(3, ddprun::core::kHangExitCode);
  hang.hang = true;
  Failure lost;
  lost.lost = true;
  lost.exit_code = 1;
  Failure start;  // a node that could not start: no signal
  start.fatal = true;
  start.exit_code = 125;
  struct Row {
    bool stopped;
    std::optional<Failure> root;
    bool want;
  };
  const Row rows[] = {
      {false, std::nullopt, false},
      {true, std::nullopt, true},
      {true, stop, true},
      {true, worker_failure(1, 3), false},  // a cancel during a failed attempt's teardown
      {true, hang, false},                  // srun's TERM while a hang is torn down
      {true, lost, false},                  // srun's TERM after a node was lost
      {true, start, false},
      {false, stop, false},
  };
  for (const auto& row : rows) {
    RunResult r;
    r.stopped_by_signal = row.stopped;
    r.signal = row.stopped ? SIGTERM : 0;
    r.root_cause = row.root;
    INFO("stopped " << row.stopped << " root exit " << (row.root ? row.root->exit_code : -1));
    CHECK(stop_is_cause(r) == row.want);
  }
}
