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
  const auto d = after_attempt(r, std::nullopt, 0, 3);
  CHECK_FALSE(d.restart);
  CHECK(d.exit_code == 0);
}

TEST_CASE("after_attempt: a failure restarts while restarts are left, then exits with its code") {
  CHECK(after_attempt(failed(3), std::nullopt, 0, 2).restart);
  CHECK(after_attempt(failed(3), std::nullopt, 1, 2).restart);
  const auto last = after_attempt(failed(3), std::nullopt, 2, 2);
  CHECK_FALSE(last.restart);
  CHECK(last.exit_code == 3);
  CHECK_FALSE(after_attempt(failed(3), std::nullopt, 0, 0).restart);
}

TEST_CASE("after_attempt: every node takes the published root cause's code") {
  RunResult torn_down = failed(143);  // this node's workers were stopped by the teardown
  torn_down.remote_abort = true;
  const auto d = after_attempt(torn_down, worker_failure(7, 7), 0, 0);
  CHECK(d.exit_code == 7);
}

TEST_CASE("after_attempt: a command that cannot start is never restarted, here or elsewhere") {
  RunResult here = failed(127);
  here.spawn_failed = true;
  CHECK_FALSE(after_attempt(here, std::nullopt, 0, 5).restart);
  // Another node's spawn failure reaches this node as the published, fatal root cause.
  Failure remote = worker_failure(4, 127);
  remote.fatal = true;
  const auto d = after_attempt(failed(143), remote, 0, 5);
  CHECK_FALSE(d.restart);
  CHECK(d.exit_code == 127);
}

TEST_CASE("after_attempt: an agent stopped by a signal ends the job with 128+signal") {
  RunResult r;
  r.exit_code = 128 + SIGTERM;
  r.stopped_by_signal = true;
  r.signal = SIGTERM;
  const auto d = after_attempt(r, std::nullopt, 0, 5);
  CHECK_FALSE(d.restart);
  CHECK(d.exit_code == 143);
  // A node stopped by its own TERM keeps 143 when the published cause is another stopped agent...
  Failure stopped_elsewhere;
  stopped_elsewhere.rank = -1;
  stopped_elsewhere.signal = SIGTERM;
  stopped_elsewhere.exit_code = 143;
  CHECK(after_attempt(r, stopped_elsewhere, 0, 5).exit_code == 143);
  // ...but a worker that failed first somewhere is the job's root cause.
  CHECK(after_attempt(r, worker_failure(2, 9), 0, 5).exit_code == 9);
  // A remote agent's stop ends this node's job too.
  CHECK_FALSE(after_attempt(failed(143), stopped_elsewhere, 0, 5).restart);
}

TEST_CASE("after_attempt: a failure never exits 0") {
  RunResult r;
  r.exit_code = 0;  // e.g. workers all exited 0 but the job was aborted elsewhere with no code
  r.root_cause = worker_failure(1, 0);
  CHECK(after_attempt(r, std::nullopt, 0, 0).exit_code == 1);
}

TEST_CASE("after_attempt: a stop after a checkpoint signal is never restarted, here or elsewhere") {
  RunResult here = failed(140);
  here.root_cause->after_signal = SIGUSR2;
  const auto d = after_attempt(here, std::nullopt, 0, 5);
  CHECK_FALSE(d.restart);
  CHECK(d.exit_code == 140);
  // Another node's rank stopped on request first: its record says so, and every node agrees.
  Failure remote = worker_failure(3, 140);
  remote.after_signal = SIGUSR2;
  CHECK_FALSE(after_attempt(failed(143), remote, 0, 5).restart);
  CHECK(after_attempt(failed(143), remote, 0, 5).exit_code == 140);
}

TEST_CASE("after_held_signal: a stop after the run cancels a restart and keeps the decided code") {
  struct Row {
    bool restart;
    int code;
    int held;
    bool want_restart;
  };
  const Row rows[] = {
      {true, 7, 0, true},          // nothing came: restart
      {true, 7, SIGTERM, false},   // scancel between the attempts: stop, with the attempt's code
      {false, 7, SIGTERM, false},  // srun's TERM after the last attempt: the code stands
      {false, 0, SIGINT, false},   // a success stays a success
  };
  for (const auto& r : rows) {
    INFO("restart " << r.restart << " code " << r.code << " held " << r.held);
    const auto d = after_held_signal(AttemptDecision{r.restart, r.code}, r.held);
    CHECK(d.restart == r.want_restart);
    CHECK(d.exit_code == r.code);
  }
}
