// Signals reaching the agent: USR1/USR2 to each worker, TERM/INT/... to every worker group, where they
// stop the job; the hold that keeps a decided outcome from any signal.
#include <fcntl.h>
#include <catch2/catch.hpp>
#include <csignal>

#include "agent/events.hpp"
#include "agent/policy.hpp"
#include "agent/signals.hpp"
#include "agent_test_util.hpp"

using namespace agent_test;

namespace {
// Still running (not a zombie)?
bool running(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

// Sends `sig` until the process ends (two deliveries of one signal may merge into one).
// The launcher holds the stopping signals around every run (hold_stop_signals): a SIGINT that
// signal_until_gone sends after the run has ended must not kill the agent before it reports.
void hold_like_the_launcher() {
  ddprun::agent::hold_stop_signals();
}
void signal_until_gone(pid_t pid, int sig) {
  for (int i = 0; i < 600 && running(pid); ++i) {
    ::kill(pid, sig);
    std::this_thread::sleep_for(50ms);
  }
}
// Runs `body` in a forked child and returns its wait status: the hold changes process-wide state.
int in_child(const std::function<int()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(body());
  int st = 0;
  ::waitpid(pid, &st, 0);
  return st;
}
}  // namespace

TEST_CASE("SIGTERM to the agent is forwarded and the job fails with 143 even if workers exit 0") {
  TempDir dir;
  std::vector<std::string> actions;
  for (int r = 0; r < 2; ++r) {
    const std::string n = std::to_string(r);
    actions.push_back("trap-term " + (dir / ("term" + n)) + " touch " + (dir / ("ready" + n)) + " hang");
  }
  const auto r = run_agent_in_child(dir, make_workers(actions), 2, fake_options(), [&](pid_t agent) {
    REQUIRE(wait_for_file(dir / "ready0"));
    REQUIRE(wait_for_file(dir / "ready1"));
    ::kill(agent, SIGTERM);
  });
  REQUIRE(r.result.is_object());
  CHECK(r.result.at("exit_code") == 143);
  CHECK(r.result.at("success") == false);
  CHECK(r.result.at("stopped_by_signal") == true);
  CHECK(r.result.at("signal") == "SIGTERM");
  CHECK(read_file(dir / "term0") == "TERM\n");
  CHECK(read_file(dir / "term1") == "TERM\n");
  CHECK(r.err.find("SIGTERM received by ddprun") != std::string::npos);
}

TEST_CASE("SIGUSR1 to the agent is forwarded and the job goes on") {
  TempDir dir;
  std::vector<std::string> actions;
  for (int r = 0; r < 2; ++r) {
    const std::string n = std::to_string(r);
    actions.push_back("trap 10 " + (dir / ("usr" + n)) + " touch " + (dir / ("ready" + n)) + " wait-file " +
                      (dir / "go") + " exit 0");
  }
  const auto r = run_agent_in_child(dir, make_workers(actions), 2, fake_options(), [&](pid_t agent) {
    REQUIRE(wait_for_file(dir / "ready0"));
    REQUIRE(wait_for_file(dir / "ready1"));
    ::kill(agent, SIGUSR1);
    CHECK(wait_for_file(dir / "usr0"));
    CHECK(wait_for_file(dir / "usr1"));
    std::ofstream(dir / "go");
  });
  REQUIRE(r.result.is_object());
  CHECK(r.result.at("exit_code") == 0);
  CHECK(r.result.at("success") == true);
  CHECK(r.result.at("stopped_by_signal") == false);
  CHECK(read_file(dir / "usr0") == "10\n");
  CHECK(read_file(dir / "usr1") == "10\n");
}

TEST_CASE("SIGUSR1 and SIGUSR2 reach the worker only: a child without a handler lives on") {
  TempDir dir;
  // The child is forked before the trap is set, like a DataLoader worker with no handler.
  const auto r = run_agent_in_child(
      dir,
      make_workers({"fork-hang " + (dir / "child") + " trap 10 " + (dir / "usr") + " trap 12 " +
                    (dir / "usr") + " touch " + (dir / "ready") + " wait-file " + (dir / "go") + " exit 0"}),
      1, fake_options(), [&](pid_t agent) {
        REQUIRE(wait_for_file(dir / "ready"));
        const pid_t child = std::stoi(read_file(dir / "child"));
        ::kill(agent, SIGUSR1);
        ::kill(agent, SIGUSR2);
        for (int i = 0; i < 200 && read_file(dir / "usr").size() < 6; ++i) std::this_thread::sleep_for(10ms);
        std::this_thread::sleep_for(100ms);  // a signal to the group would have ended the child by now
        CHECK(running(child));
        std::ofstream(dir / "go");
      });
  REQUIRE(r.result.is_object());
  CHECK(r.result.at("exit_code") == 0);
  const std::string usr = read_file(dir / "usr");
  CHECK((usr == "10\n12\n" || usr == "12\n10\n"));  // both arrived, in either order
}

namespace {
// Rank 0 exited 140 at once on SIGUSR2 and rank 1 a second later: a stop on request, rank 0 its first
// exit, and nobody stopped by ddprun.
void check_stopped_on_request(const ChildRun& r) {
  REQUIRE_FALSE(r.timed_out);
  REQUIRE(r.result.is_object());
  CHECK(r.result.at("exit_code") == 140);
  CHECK(r.result.at("root_cause").at("rank") == 0);
  CHECK(r.result.at("root_cause").at("after_signal") == SIGUSR2);
  for (const auto& w : r.result.at("workers")) {
    CHECK(w.at("exit_code") == 140);  // rank 1 finished its "checkpoint": no TERM reached it
    CHECK(w.at("stopped_by_ddprun") == false);
  }
}
}  // namespace

TEST_CASE("after SIGUSR2 the ranks get the grace: one exits 140 at once, the other a second later") {
  TempDir dir;
  const auto r = run_agent_in_child(dir,
                                    make_workers({"exit-on 12 0 140 touch " + (dir / "ready0") + " hang",
                                                  "exit-on 12 1000 140 touch " + (dir / "ready1") + " hang"}),
                                    2, fake_options(), [&](pid_t agent) {
                                      REQUIRE(wait_for_file(dir / "ready0"));
                                      REQUIRE(wait_for_file(dir / "ready1"));
                                      ::kill(agent, SIGUSR2);
                                    });
  check_stopped_on_request(r);
  CHECK(r.err.find("ddprun: stopped after SIGUSR2 with exit code 140") != std::string::npos);
  CHECK(r.err.find("First exit after SIGUSR2:") != std::string::npos);
  CHECK(r.err.find("job failed") == std::string::npos);
  CHECK(r.err.find("Root cause") == std::string::npos);
}

// slurmstepd signals a step's processes from the leaves up: a rank can exit 140 on the checkpoint signal
// before the agent has its own copy. Its exit must still count as a stop on request.
TEST_CASE("under Slurm a rank that exits on SIGUSR2 before the agent gets it still stopped on request") {
  TempDir dir;
  AgentRun run(fake_options());
  run.opts.signal_settle = 2s;  // longer than kSlurmSignalSettle: the test does not race its own scheduler
  // The agent's events say when it has taken rank 0's exit.
  const std::string events_path = dir / "events.jsonl";
  const int events_fd = ::open(events_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  REQUIRE(events_fd >= 0);
  ddprun::agent::Events events(ddprun::agent::LogFormat::json, events_fd);
  run.events = &events;
  const auto r = run_agent_in_child(
      dir,
      make_workers({"exit-on 12 0 140 pid " + (dir / "pid0") + " touch " + (dir / "ready0") + " hang",
                    "exit-on 12 1000 140 touch " + (dir / "ready1") + " hang"}),
      2, run, [&](pid_t agent) {
        REQUIRE(wait_for_file(dir / "ready0"));
        REQUIRE(wait_for_file(dir / "ready1"));
        ::kill(std::stoi(read_file(dir / "pid0")), SIGUSR2);
        const auto deadline = std::chrono::steady_clock::now() + 30s;
        while (read_file(events_path).find("\"worker_exited\"") == std::string::npos &&
               std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(1ms);
        }
        ::kill(agent, SIGUSR2);
      });
  ::close(events_fd);
  check_stopped_on_request(r);
  const std::string log = read_file(events_path);
  INFO(log);
  CHECK(log.find("\"teardown\"") == std::string::npos);
}

TEST_CASE("after SIGUSR2 a rank that does not exit within the grace is stopped once it is over") {
  TempDir dir;
  auto opts = fake_options();
  opts.term_timeout = 1s;
  const auto start = std::chrono::steady_clock::now();
  const auto r =
      run_agent_in_child(dir,
                         make_workers({"exit-on 12 0 140 touch " + (dir / "ready0") + " hang",
                                       "trap 12 " + (dir / "usr") + " touch " + (dir / "ready1") + " hang"}),
                         2, opts, [&](pid_t agent) {
                           REQUIRE(wait_for_file(dir / "ready0"));
                           REQUIRE(wait_for_file(dir / "ready1"));
                           ::kill(agent, SIGUSR2);
                         });
  REQUIRE_FALSE(r.timed_out);
  REQUIRE(r.result.is_object());
  CHECK(std::chrono::steady_clock::now() - start >= 1s);
  CHECK(r.result.at("exit_code") == 140);
  CHECK(r.result.at("workers").at(1).at("signal") == "SIGTERM");
  CHECK(r.result.at("workers").at(1).at("stopped_by_ddprun") == true);
  CHECK(r.result.at("workers").at(1).at("duration_s").get<double>() >= 0.9);
}

TEST_CASE("a failure long after a checkpoint signal is a failure: teardown at once") {
  TempDir dir;
  auto opts = fake_options();
  opts.term_timeout = 300ms;
  opts.error_file = dir / "error.json";
  const auto r =
      run_agent_in_child(dir,
                         make_workers({"trap 12 " + (dir / "usr") + " touch " + (dir / "ready0") +
                                           " wait-file " + (dir / "go") + " exit 3",
                                       "trap 12 " + (dir / "usr") + " touch " + (dir / "ready1") + " hang"}),
                         2, opts, [&](pid_t agent) {
                           REQUIRE(wait_for_file(dir / "ready0"));
                           REQUIRE(wait_for_file(dir / "ready1"));
                           ::kill(agent, SIGUSR2);
                           // Both workers have the signal: the agent forwarded it, so its grace began
                           // before this. Then twice the grace passes, whatever the load (a lower bound).
                           for (int i = 0; i < 6000 && read_file(dir / "usr") != "12\n12\n"; ++i) {
                             std::this_thread::sleep_for(10ms);
                           }
                           REQUIRE(read_file(dir / "usr") == "12\n12\n");
                           std::this_thread::sleep_for(2 * opts.term_timeout);  // the grace is over
                           std::ofstream(dir / "go");
                         });
  REQUIRE(r.result.is_object());
  CHECK(r.result.at("exit_code") == 3);
  CHECK(r.result.at("root_cause").at("after_signal") == 0);
  CHECK(r.result.at("workers").at(1).at("signal") == "SIGTERM");
  CHECK(r.err.find("job failed with exit code 3") != std::string::npos);
}

TEST_CASE("a second SIGINT kills at once instead of waiting for the grace period") {
  TempDir dir;
  auto opts = fake_options();
  opts.term_timeout = std::chrono::milliseconds(600000);  // the test would time out without the second INT
  const auto r = run_agent_in_child(
      dir, make_workers({"ignore-term trap 2 " + (dir / "int") + " touch " + (dir / "ready") + " hang"}), 1,
      opts,
      [&](pid_t agent) {
        REQUIRE(wait_for_file(dir / "ready"));
        ::kill(agent, SIGINT);
        REQUIRE(wait_for_file(dir / "int"));
        signal_until_gone(agent, SIGINT);
      },
      hold_like_the_launcher);
  REQUIRE_FALSE(r.timed_out);
  REQUIRE(r.result.is_object());
  CHECK(r.result.at("exit_code") == 130);
  CHECK(r.result.at("stopped_by_signal") == true);
  CHECK(r.result.at("workers").at(0).at("signal") == "SIGKILL");
}

TEST_CASE("a worker failure before the signal stays the root cause") {
  TempDir dir;
  auto opts = fake_options();
  opts.term_timeout = std::chrono::milliseconds(600000);
  const auto r = run_agent_in_child(
      dir,
      make_workers({"wait-file " + (dir / "ready") + " exit 5",
                    "trap 15 " + (dir / "term") + " touch " + (dir / "ready") + " hang"}),
      2, opts,
      [&](pid_t agent) {
        // Rank 1 sees the teardown's TERM: rank 0's failure has been handled. Then stop
        // the agent; a second Ctrl-C skips the grace period.
        REQUIRE(wait_for_file(dir / "term"));
        signal_until_gone(agent, SIGINT);
      },
      hold_like_the_launcher);
  REQUIRE_FALSE(r.timed_out);
  REQUIRE(r.result.is_object());
  CHECK(r.result.at("exit_code") == 5);
  CHECK(r.result.at("root_cause").at("rank") == 0);
  CHECK(r.result.at("stopped_by_signal") == true);
  CHECK(r.result.at("signal") == "SIGINT");
}

TEST_CASE("repeated SIGTERM keeps the grace period so workers can checkpoint") {
  // At a time limit Slurm may TERM the agent more than once within milliseconds; the workers must still
  // get their whole grace period instead of a SIGKILL.
  TempDir dir;
  auto opts = fake_options();
  opts.term_timeout = std::chrono::milliseconds(600000);
  const auto r = run_agent_in_child(
      dir,
      make_workers({"trap 15 " + (dir / "term") + " touch " + (dir / "ready") + " wait-file " +
                    (dir / "saved") + " exit 0"}),
      1, opts, [&](pid_t agent) {
        REQUIRE(wait_for_file(dir / "ready"));
        for (int i = 0; i < 3; ++i) ::kill(agent, SIGTERM);
        REQUIRE(wait_for_file(dir / "term"));
        std::ofstream(dir / "saved");  // the "checkpoint" is done: the worker exits 0 by itself
      });
  REQUIRE_FALSE(r.timed_out);
  REQUIRE(r.result.is_object());
  CHECK(r.result.at("exit_code") == 143);
  CHECK(r.result.at("stopped_by_signal") == true);
  CHECK(r.result.at("workers").at(0).at("exit_code") == 0);
  CHECK(r.result.at("workers").at(0).at("signal").is_null());
}

TEST_CASE("held stop signals are caught, never fatal, and the first one is kept") {
  using namespace ddprun::agent;
  const int st = in_child([] {
    hold_stop_signals();
    ::raise(SIGTERM);
    ::raise(SIGINT);
    ::raise(SIGHUP);
    ::raise(SIGQUIT);
    if (held_stop_signal() != SIGTERM) return 1;
    // A signal was caught: the hold stays, so a later one cannot kill the process either.
    if (release_stop_signals() != SIGTERM) return 2;
    ::raise(SIGTERM);
    return held_stop_signal() == SIGTERM ? 0 : 3;
  });
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
}

TEST_CASE("releasing a hold that caught nothing brings the previous dispositions back") {
  using namespace ddprun::agent;
  const int st = in_child([] {
    std::signal(SIGHUP, SIG_IGN);   // e.g. nohup
    std::signal(SIGTERM, SIG_DFL);  // not the test framework's handler
    hold_stop_signals();
    if (release_stop_signals() != 0) return 1;
    struct sigaction sa {};
    ::sigaction(SIGHUP, nullptr, &sa);
    if (sa.sa_handler != SIG_IGN) return 2;
    ::raise(SIGTERM);  // the default again: fatal
    return 3;
  });
  REQUIRE(WIFSIGNALED(st));
  CHECK(WTERMSIG(st) == SIGTERM);
}

TEST_CASE("a run's watcher takes over from the hold and gives it back when the run ends") {
  using namespace ddprun::agent;
  const int st = in_child([] {
    hold_stop_signals();
    ::raise(SIGHUP);  // before the run: the run's watcher reads it as if it came during the run
    {
      SignalWatcher w(forwarded_signals());
      if (held_stop_signal() != 0) return 1;
      ::raise(SIGTERM);
      if (w.drain() != std::vector<int>{SIGHUP, SIGTERM}) return 2;
    }
    ::raise(SIGTERM);  // after the run: held, not fatal
    return held_stop_signal() == SIGTERM ? 0 : 3;
  });
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
}

TEST_CASE("a stop the run's loop never read goes back to the hold with the watcher") {
  // Node 0 gathers a failed attempt's records after its loop stopped: a TERM then must still cancel
  // the restart, not vanish with the watcher's pipe.
  using namespace ddprun::agent;
  const int st = in_child([] {
    hold_stop_signals();
    {
      SignalWatcher w(forwarded_signals());
      ::raise(SIGUSR1);  // not a stop: dropped
      ::raise(SIGTERM);
      ::raise(SIGINT);
    }
    if (held_stop_signal() != SIGTERM) return 1;
    return release_stop_signals() == SIGTERM ? 0 : 2;
  });
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
}

TEST_CASE("a stop caught by the hold just before the run stops the run") {
  TempDir dir;
  const auto r = run_agent_in_child(dir, make_workers({"hang"}), 1, fake_options(), {}, [] {
    ddprun::agent::hold_stop_signals();
    ::raise(SIGTERM);
  });
  REQUIRE_FALSE(r.timed_out);
  REQUIRE(r.result.is_object());
  CHECK(r.result.at("exit_code") == 143);
  CHECK(r.result.at("stopped_by_signal") == true);
}

TEST_CASE("a TERM right after a failed run never changes its exit code") {
  // What srun --kill-on-bad-exit does once another node exited with the root cause's code.
  TempDir dir;
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::FILE* e = std::freopen((dir / "err").c_str(), "w", stderr);
    if (e == nullptr) ::_exit(90);
    ddprun::agent::hold_stop_signals();
    ddprun::agent::LocalCoordinator coord;
    const auto r =
        ddprun::agent::run_workers(make_workers({"exit 7"}), 1, fake_options(), {}, coord, nullptr);
    ::raise(SIGTERM);
    ::_exit(ddprun::agent::after_attempt(r, 0, 0).exit_code);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 7);
}
