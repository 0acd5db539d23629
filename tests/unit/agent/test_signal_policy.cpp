// What a signal reaching the agent does: the whole decision table of signal_action.
#include <catch2/catch.hpp>
#include <csignal>

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
