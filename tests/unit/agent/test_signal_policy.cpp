// What a signal reaching the agent does: the whole decision table of signal_action.
#include <catch2/catch.hpp>
#include <csignal>
#include <string>
#include <utility>
#include <vector>

#include "agent/policy.hpp"

using ddprun::agent::signal_action;
using ddprun::agent::SignalAction;

TEST_CASE("signal_action: every row of the signal table") {
  struct Row {
    int sig;
    int previous;  // the agent's first stopping signal so far
    bool teardown_started;
    SignalAction want;
  };
  const Row rows[] = {
      // USR1/USR2 are checkpoint requests: always forwarded, the job goes on.
      {SIGUSR1, 0, false, SignalAction::forward},
      {SIGUSR2, 0, false, SignalAction::forward},
      {SIGUSR1, 0, true, SignalAction::forward},
      {SIGUSR2, SIGTERM, true, SignalAction::forward},
      {SIGUSR1, SIGINT, true, SignalAction::forward},
      // The first stopping signal starts the teardown with itself.
      {SIGTERM, 0, false, SignalAction::teardown},
      {SIGINT, 0, false, SignalAction::teardown},
      {SIGHUP, 0, false, SignalAction::teardown},
      {SIGQUIT, 0, false, SignalAction::teardown},
      // A worker failure already started the teardown: forward it (the job still counts as stopped).
      {SIGTERM, 0, true, SignalAction::forward},
      {SIGINT, 0, true, SignalAction::forward},
      {SIGHUP, 0, true, SignalAction::forward},
      {SIGQUIT, 0, true, SignalAction::forward},
      // Ctrl-C twice means now.
      {SIGINT, SIGINT, true, SignalAction::kill},
      {SIGINT, SIGINT, false, SignalAction::kill},
      // Repeated TERM/HUP/QUIT (Slurm repeats TERM at a time limit) keep the grace.
      {SIGTERM, SIGTERM, true, SignalAction::ignore},
      {SIGHUP, SIGHUP, true, SignalAction::ignore},
      {SIGQUIT, SIGQUIT, true, SignalAction::ignore},
      {SIGINT, SIGTERM, true, SignalAction::ignore},
      {SIGTERM, SIGINT, true, SignalAction::ignore},
      {SIGHUP, SIGINT, true, SignalAction::ignore},
      {SIGQUIT, SIGTERM, false, SignalAction::ignore},
  };
  for (const auto& r : rows) {
    INFO("sig " << r.sig << ", previous " << r.previous << ", teardown started " << r.teardown_started);
    CHECK(signal_action(r.sig, r.previous, r.teardown_started) == r.want);
  }
}

TEST_CASE("signal_action: the event names of the actions") {
  using ddprun::agent::to_string;
  CHECK(to_string(SignalAction::forward) == "forward");
  CHECK(to_string(SignalAction::teardown) == "teardown");
  CHECK(to_string(SignalAction::kill) == "kill");
  CHECK(to_string(SignalAction::ignore) == "ignore");
}

TEST_CASE("signal_target: checkpoint requests reach the worker process, everything else its group") {
  using ddprun::agent::signal_target;
  using ddprun::agent::SignalTarget;
  struct Row {
    int sig;
    SignalTarget want;
  };
  const Row rows[] = {
      // A DataLoader child has no USR1/USR2 handler: a group signal would kill it.
      {SIGUSR1, SignalTarget::process},
      {SIGUSR2, SignalTarget::process},
      // Stopping the job reaches whatever the worker started.
      {SIGTERM, SignalTarget::group},
      {SIGINT, SignalTarget::group},
      {SIGHUP, SignalTarget::group},
      {SIGQUIT, SignalTarget::group},
      {SIGKILL, SignalTarget::group},
  };
  for (const auto& r : rows) {
    INFO("sig " << r.sig);
    CHECK(signal_target(r.sig) == r.want);
  }
}

TEST_CASE("teardown_delay: after a checkpoint signal the workers keep the rest of the grace") {
  using ddprun::agent::teardown_delay;
  using std::chrono::milliseconds;
  struct Row {
    long grace_left;  // of this node's grace after its last forwarded USR1/USR2; 0: none runs
    bool after_signal;
    long want;
  };
  const Row rows[] = {
      {0, false, 0},        // an ordinary failure: teardown at once
      {4000, false, 4000},  // a failure while the grace runs (maybe a remote one): wait for its end
      {4000, true, 4000},   // the rank that exited 140 after the signal: the others keep the rest
      {0, true, 10000},     // another node's stop on request: our signal is on its way, full grace
      {1, true, 1},         // our grace is almost over: the signal reached us long ago
  };
  for (const auto& r : rows) {
    INFO("grace left " << r.grace_left << " ms, after signal " << r.after_signal);
    CHECK(teardown_delay(milliseconds(r.grace_left), r.after_signal, milliseconds(10000)) ==
          milliseconds(r.want));
  }
}

TEST_CASE("ended_on_late_signal: a failure just before a checkpoint signal ended on it") {
  using ddprun::agent::ended_on_late_signal;
  using std::chrono::milliseconds;
  const auto t0 = std::chrono::steady_clock::now();
  struct Row {
    long signal_after;  // ms from the worker's exit to the agent reading the signal
    long settle;
    bool want;
  };
  const Row rows[] = {
      {0, 100, true},     // Slurm signalled the worker and the agent together
      {99, 100, true},    // slurmstepd reached the agent late, within the settle
      {100, 100, false},  // the settle is over: the failure was decided as the worker's own
      {500, 100, false},  // a signal long after a failure
      {-5, 100, false},   // the signal came first: the exit already carries it
      {0, 0, false},      // outside Slurm nothing settles: the agent forwards every signal itself
  };
  for (const auto& r : rows) {
    INFO("signal " << r.signal_after << " ms after the exit, settle " << r.settle << " ms");
    CHECK(ended_on_late_signal(t0, t0 + milliseconds(r.signal_after), milliseconds(r.settle)) == r.want);
  }
}

TEST_CASE("signal_action: each action's name, from its table") {
  using ddprun::agent::kSignalActionNames;
  const std::vector<std::pair<SignalAction, std::string>> rows = {{SignalAction::forward, "forward"},
                                                                  {SignalAction::teardown, "teardown"},
                                                                  {SignalAction::kill, "kill"},
                                                                  {SignalAction::ignore, "ignore"}};
  CHECK(kSignalActionNames.size() == rows.size());
  for (const auto& [action, name] : rows) {
    CHECK(ddprun::agent::to_string(action) == name);
    CHECK(ddprun::core::value_of(kSignalActionNames, name) == action);
  }
}
