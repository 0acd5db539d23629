// The supervisor with real processes: exit codes, teardown, isolation of workers, exec errors.
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <catch2/catch.hpp>

#include <cerrno>
#include <csignal>

#include "agent_test_util.hpp"

using namespace agent_test;
using ddprun::agent::AgentOptions;

namespace {
const nlohmann::json& worker(const ChildRun& r, int rank) {
  for (const auto& w : r.result.at("workers")) {
    if (w.at("rank") == rank) return w;
  }
  throw std::runtime_error("no such rank in result");
}
}  // namespace

TEST_CASE("a worker's exit code is the job's - the others are stopped") {
  TempDir dir;
  const auto r = run_agent_in_child(dir, make_workers({"hang", "sleep 50 exit 3"}), 2, fake_options());
  REQUIRE_FALSE(r.timed_out);
  REQUIRE(r.result.is_object());
  CHECK(r.result.at("exit_code") == 3);
  CHECK(r.result.at("success") == false);
  CHECK(r.result.at("root_cause").at("rank") == 1);
  CHECK(r.result.at("root_cause").at("exit_code") == 3);
  CHECK(worker(r, 0).at("signal") == "SIGTERM");
  CHECK(worker(r, 0).at("stopped_by_ddprun") == true);
  CHECK(r.err.find("Root cause") != std::string::npos);
}

TEST_CASE("a worker killed by a signal gives 128+signal") {
  TempDir dir;
  const auto r = run_agent_in_child(dir, make_workers({"signal 9"}), 1, fake_options());
  REQUIRE(r.result.is_object());
  CHECK(r.result.at("exit_code") == 137);
  CHECK(r.result.at("root_cause").at("signal_name") == "SIGKILL");
  CHECK(r.err.find("SIGKILL (exit 137)") != std::string::npos);
}

TEST_CASE("every worker exiting 0 is a success with a summary table") {
  TempDir dir;
  auto opts = fake_options();
  opts.error_file = dir / "error.json";
  const auto r = run_agent_in_child(dir, make_workers({"exit 0", "exit 0"}), 2, opts);
  REQUIRE(r.result.is_object());
  CHECK(r.result.at("exit_code") == 0);
  CHECK(r.result.at("success") == true);
  CHECK(r.err.find("summary") != std::string::npos);
  CHECK(r.err.find("Root cause") == std::string::npos);
  CHECK_FALSE(fs::exists(dir / "error.json"));
  int rows = 0;
  for (const auto& l : split_lines(r.err)) rows += l.find("testhost") != std::string::npos ? 1 : 0;
  CHECK(rows == 2);
}

TEST_CASE("first failure: TERM to the others, KILL after the grace for one that ignores TERM") {
  TempDir dir;
  auto opts = fake_options();
  opts.term_timeout = std::chrono::milliseconds(300);
  const std::string r1 = dir / "r1";
  const std::string r2 = dir / "r2";
  const auto r =
      run_agent_in_child(dir,
                         make_workers({"wait-file " + r1 + " wait-file " + r2 + " exit 3",
                                       "touch " + r1 + " hang", "ignore-term touch " + r2 + " hang"}),
                         3, opts);
  REQUIRE(r.result.is_object());
  CHECK(r.result.at("exit_code") == 3);
  CHECK(r.result.at("root_cause").at("rank") == 0);
  CHECK(worker(r, 1).at("signal") == "SIGTERM");
  CHECK(worker(r, 2).at("signal") == "SIGKILL");
  CHECK(worker(r, 2).at("stopped_by_ddprun") == true);
}

TEST_CASE("workers inherit no descriptors, run in their own process group, with clean signals") {
  TempDir dir;
  // The second worker is started while the first one's pipes are open in the agent.
  const auto r =
      run_agent_in_child(dir, make_workers({"exit 0", "fds pgid sigstate"}), 1, fake_options(), {}, [] {
        ::open("/dev/null", O_RDONLY);  // deliberately without O_CLOEXEC
        std::signal(SIGALRM, SIG_IGN);
        sigset_t s;
        sigemptyset(&s);
        sigaddset(&s, SIGALRM);
        ::sigprocmask(SIG_BLOCK, &s, nullptr);
      });
  REQUIRE(r.result.is_object());
  CHECK(r.result.at("exit_code") == 0);
  const auto lines = split_lines(r.out);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == "fds: 0 1 2");
  int pgid = 0;
  int pid = 0;
  REQUIRE(std::sscanf(lines[1].c_str(), "pgid %d pid %d", &pgid, &pid) == 2);
  CHECK(pgid == pid);
  CHECK(pgid != ::getpgrp());
  CHECK(lines[2] == "SigBlk:\t0000000000000000");
  CHECK(lines[3] == "SigIgn:\t0000000000000000");
}

TEST_CASE("workers get the agent's environment with the plan's variables") {
  TempDir dir;
  const auto r = run_agent_in_child(dir, make_workers({"env RANK env DDPRUN_TEST_VAR", "env RANK"}, 0, 4), 8,
                                    fake_options(), {}, [] { ::setenv("DDPRUN_TEST_VAR", "from-agent", 1); });
  REQUIRE(r.result.is_object());
  CHECK(r.out.find("[4]: RANK=4\n") != std::string::npos);
  CHECK(r.out.find("[4]: DDPRUN_TEST_VAR=from-agent\n") != std::string::npos);
  CHECK(r.out.find("[5]: RANK=5\n") != std::string::npos);
}

TEST_CASE("a missing program fails before the job starts, naming the file and the rank") {
  TempDir dir;
  auto opts = fake_options();
  opts.command = {"/nonexistent/ddprun-prog", "arg"};
  const auto r = run_agent_in_child(dir, make_workers({"", ""}, 0, 2), 4, opts);
  REQUIRE(r.result.is_object());
  CHECK(r.result.at("exit_code") == 127);
  CHECK(r.result.at("spawn_failed") == true);
  const auto lines = split_lines(r.err);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].find("no such file: /nonexistent/ddprun-prog") != std::string::npos);
  CHECK(lines[0].find("rank 2") != std::string::npos);
}

TEST_CASE("a file without execute permission is reported as permission denied") {
  TempDir dir;
  const std::string prog = dir / "not-executable";
  std::ofstream(prog) << "#!/bin/sh\nexit 0\n";
  ::chmod(prog.c_str(), 0644);
  auto opts = fake_options();
  opts.command = {prog};
  const auto r = run_agent_in_child(dir, make_workers({""}), 1, opts);
  REQUIRE(r.result.is_object());
  CHECK(r.result.at("exit_code") == 126);
  CHECK(r.err.find("permission denied: " + prog) != std::string::npos);
}

TEST_CASE("a .py command and -m run under the configured interpreter with -u") {
  TempDir dir;
  const std::string script = dir / "train.py";
  std::ofstream(script) << "print('hi')\n";
  auto opts = fake_options();
  opts.python = "echo";  // stands in for python: shows the argv it was given
  opts.command = {script, "--lr", "1"};
  auto r = run_agent_in_child(dir, make_workers({""}), 1, opts);
  CHECK(r.out == "-u " + script + " --lr 1\n");
  opts.module = true;
  opts.command = {"pkg.train", "x"};
  r = run_agent_in_child(dir, make_workers({""}), 1, opts);
  CHECK(r.out == "-u -m pkg.train x\n");
  opts.module = false;
  opts.no_python = true;
  opts.command = {"/bin/echo", "plain.py"};
  r = run_agent_in_child(dir, make_workers({""}), 1, opts);
  CHECK(r.out == "plain.py\n");
}

TEST_CASE("no worker survives the agent being SIGKILLed") {
  TempDir dir;
  // Orphans are re-parented to us, so we can see how they died.
  REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  std::vector<pid_t> pids;
  const auto r = run_agent_in_child(
      dir, make_workers({"pid " + (dir / "p0") + " hang", "ignore-term pid " + (dir / "p1") + " hang"}), 2,
      fake_options(), [&](pid_t agent) {
        for (const char* f : {"p0", "p1"}) {
          REQUIRE(wait_for_file(dir / f));
          pids.push_back(std::stoi(read_file(dir / f)));
        }
        ::kill(agent, SIGKILL);
      });
  CHECK(WIFSIGNALED(r.status));
  REQUIRE(pids.size() == 2);
  for (pid_t p : pids) {
    int st = 0;
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    pid_t w = 0;
    // ECHILD: not re-parented to us yet (on a loaded machine the kernel does it late after the agent).
    while (((w = ::waitpid(p, &st, WNOHANG)) == 0 || (w < 0 && errno == ECHILD)) &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(5ms);
    }
    if (w <= 0) ::kill(p, SIGKILL);  // clean up before failing
    REQUIRE(w == p);
    CHECK(WIFSIGNALED(st));
    CHECK(WTERMSIG(st) == SIGKILL);
  }
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
}

TEST_CASE("no child of a worker survives the agent being SIGKILLed") {
  TempDir dir;
  // Orphans are re-parented to us, so we can see how they died.
  REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  pid_t child = -1;
  const auto r = run_agent_in_child(dir, make_workers({"fork-hang " + (dir / "child") + " hang"}), 1,
                                    fake_options(), [&](pid_t agent) {
                                      REQUIRE(wait_for_file(dir / "child"));
                                      child = std::stoi(read_file(dir / "child"));
                                      ::kill(agent, SIGKILL);
                                    });
  CHECK(WIFSIGNALED(r.status));
  REQUIRE(child > 0);
  int st = 0;
  pid_t w = 0;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  // ECHILD: not re-parented to us yet (the agent's reaper holds it first, and a loaded machine runs it
  // late); 0: ours but still running.
  while (((w = ::waitpid(child, &st, WNOHANG)) == 0 || (w < 0 && errno == ECHILD)) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  if (w <= 0) ::kill(child, SIGKILL);  // clean up before failing
  REQUIRE(w == child);
  CHECK(WIFSIGNALED(st));
  CHECK(WTERMSIG(st) == SIGKILL);
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {  // the worker and the reaper, re-parented to us
  }
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
}

TEST_CASE("processes a worker leaves in its group are killed when the job ends") {
  TempDir dir;
  const auto r = run_agent_in_child(
      dir, make_workers({"fork-hang " + (dir / "child") + " print done exit 0"}), 1, fake_options());
  REQUIRE_FALSE(r.timed_out);
  REQUIRE(r.result.is_object());
  CHECK(r.result.at("success") == true);
  CHECK(r.out == "done\n");
  REQUIRE(fs::exists(dir / "child"));
  const pid_t child = std::stoi(read_file(dir / "child"));
  // It was re-parented away from us, so look at /proc: gone or a zombie once killed.
  bool gone = false;
  for (int i = 0; i < 3000 && !gone; ++i) {
    const std::string stat = read_file("/proc/" + std::to_string(child) + "/stat");
    const auto close = stat.rfind(')');
    gone = stat.empty() || (close != std::string::npos && stat.at(close + 2) == 'Z');
    if (!gone) std::this_thread::sleep_for(10ms);
  }
  if (!gone) ::kill(child, SIGKILL);
  CHECK(gone);
}

TEST_CASE("quiet hides the tables but never the failure: the root cause is still on stderr") {
  TempDir dir;
  auto opts = fake_options();
  opts.quiet = true;
  const auto r =
      run_agent_in_child(dir, make_workers({"hang", "eprint first-clue eprint last-words exit 3"}), 2, opts);
  REQUIRE_FALSE(r.timed_out);
  REQUIRE(r.result.is_object());
  CHECK(r.result.at("exit_code") == 3);
  CHECK(r.err.find("ddprun: job failed with exit code 3") != std::string::npos);
  CHECK(r.err.find("Root cause") != std::string::npos);
  CHECK(r.err.find("host      : testhost") != std::string::npos);
  CHECK(r.err.find("rank      : 1 (local rank 1)") != std::string::npos);
  CHECK(r.err.find("exit code : 3") != std::string::npos);
  CHECK(r.err.find("reason    : exited with code 3") != std::string::npos);
  CHECK(r.err.find("    | first-clue\n    | last-words\n") != std::string::npos);
  // No tables: neither the summary nor the list of workers stopped by the teardown.
  CHECK(r.err.find("summary") == std::string::npos);
  CHECK(r.err.find("Other failures") == std::string::npos);
}

TEST_CASE("a quiet run that succeeds prints nothing of ddprun's own") {
  TempDir dir;
  auto opts = fake_options();
  opts.quiet = true;
  const auto r = run_agent_in_child(dir, make_workers({"print hello exit 0", "exit 0"}), 2, opts);
  REQUIRE(r.result.is_object());
  CHECK(r.result.at("success") == true);
  CHECK(r.err.empty());
  CHECK(r.out == "[0]: hello\n");
}
