// --health-check's verdict: the node's line from what the check did (pure), and the runner on /bin/sh.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "agent/signals.hpp"
#include "launcher/health_check.hpp"
#include "support/temp_dir.hpp"

using ddprun::launcher::HealthCheckRun;
using ddprun::launcher::judge_health_check;
using ddprun::launcher::output_tail;

TEST_CASE("health check verdict table", "[launcher][health]") {
  struct Row {
    HealthCheckRun run;
    std::optional<int> node_rank;
    std::optional<std::string> want;  // nullopt: healthy
  };
  const std::vector<Row> rows = {
      {{false, 0, "all good\n"}, 1, std::nullopt},
      {{false, 0, ""}, std::nullopt, std::nullopt},
      {{false, 7, "a\nb\n"},
       1,
       "node 1 (h1) failed its health check (--health-check): exited with code 7; output: a | b; fix the "
       "node "
       "or leave it out of the job"},
      {{false, 1, ""},
       std::nullopt,
       "node h1 failed its health check (--health-check): exited with code 1; no output; fix the node or "
       "leave "
       "it out of the job"},
      {{false, 137, "x"},
       0,
       "node 0 (h1) failed its health check (--health-check): exited with code 137; output: x; fix the node "
       "or "
       "leave it out of the job"},
      {{true, 0, "probing\n"},
       2,
       "node 2 (h1) failed its health check (--health-check): timed out after 2.5 s; output: probing; fix "
       "the "
       "node or leave it out of the job"},
  };
  for (const auto& r : rows) {
    INFO(r.run.output);
    CHECK(judge_health_check(r.run, "h1", r.node_rank, 2.5) == r.want);
  }
}

TEST_CASE("health check output tail: last lines, one printable line", "[launcher][health]") {
  CHECK(output_tail("", 5).empty());
  CHECK(output_tail("\n\n", 5).empty());
  CHECK(output_tail("1\n2\n3\n4\n5\n6\n7\n", 5) == "3 | 4 | 5 | 6 | 7");
  CHECK(output_tail("a\r\n\nb", 5) == "a | b");
  CHECK(output_tail("tab\there \x1b[31mred\xff", 5) == "tab\\x09here \\x1b[31mred\\xff");
  CHECK(output_tail(std::string("nul\0byte", 8), 1) == "nul\\x00byte");
}

TEST_CASE("health check runner: code, output, timeout", "[launcher][health]") {
  const auto ok = ddprun::launcher::run_health_check("echo out; echo err >&2", 30);
  CHECK_FALSE(ok.timed_out);
  CHECK(ok.status == 0);
  CHECK(ok.output == "out\nerr\n");
  const auto bad = ddprun::launcher::run_health_check("exit 3", 30);
  CHECK(bad.status == 3);
  const auto big = ddprun::launcher::run_health_check("head -c 100000 /dev/zero; echo; echo end", 30);
  CHECK(big.output.size() == ddprun::launcher::kHealthCheckOutputCap);
  CHECK(output_tail(big.output, 1) == "end");
  const auto hung = ddprun::launcher::run_health_check("echo started; sleep 600", 0.5);
  CHECK(hung.timed_out);
  CHECK(hung.output == "started\n");
}

TEST_CASE("health check runner: the caller's stop test ends the check, with no verdict and no stop held",
          "[launcher][health]") {
  // The job ended while a standby's check ran: the check is killed, neither failed nor timed out.
  int asked = 0;
  const auto run =
      ddprun::launcher::run_health_check("echo started; sleep 600", 60, [&] { return ++asked >= 3; });
  CHECK(run.interrupted);
  CHECK_FALSE(run.timed_out);
  CHECK(run.stopped == 0);
  CHECK(ddprun::agent::held_stop_signal() == 0);
  CHECK_FALSE(ddprun::launcher::judge_health_check(run, "n1", 1, 60));
  // A check that ends first is judged as ever.
  const auto bad = ddprun::launcher::run_health_check("exit 3", 60, [] { return false; });
  CHECK_FALSE(bad.interrupted);
  CHECK(bad.status == 3);
}

TEST_CASE("health check runner: a stop ends the check and what it started, and stays held",
          "[launcher][health]") {
  // scancel while a node checks itself: before, the agent died at once and the check's children ran on.
  ddprun::test::TempDir dir;
  const std::string pid_file = dir / "sleep.pid";
  const pid_t child = ::fork();
  if (child == 0) {
    std::thread stopper([&] {
      while (::access(pid_file.c_str(), F_OK) != 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      ::kill(::getpid(), SIGTERM);
    });
    const auto run = ddprun::launcher::run_health_check(
        "sleep 600 & echo $! > " + pid_file + ".tmp; mv " + pid_file + ".tmp " + pid_file + "; wait", 60);
    stopper.join();
    const bool held = ddprun::agent::held_stop_signal() == SIGTERM;
    ::_exit(run.stopped == SIGTERM && !run.timed_out && held ? 0 : 1);
  }
  int st = 0;
  ::waitpid(child, &st, 0);
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
  std::ifstream in(pid_file);
  pid_t sleeper = 0;
  REQUIRE(in >> sleeper);
  // Killed with the check's group (a zombie until init reaps it at most): kill(0) fails or it is a zombie.
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {
    std::ifstream stat("/proc/" + std::to_string(sleeper) + "/stat");
    std::string line;
    gone = !std::getline(stat, line) || line.find(") Z") != std::string::npos;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(gone);
}

TEST_CASE("health check: the first round's nodes that did not join, named on node rank 0",
          "[launcher][health]") {
  using ddprun::launcher::left_out_line;
  CHECK_FALSE(left_out_line(3, {0, 1, 2}, {"n1", "n2", "n3"}));
  CHECK(left_out_line(3, {0, 2}, {"n1", "n2", "n3"}) ==
        "the first round closed without 1 of the step's 3 nodes: n2 (node rank 1) (did not join: a failed "
        "--health-check, or not started in time); the job runs on the other 2");
  // A host not known is named by node rank alone.
  CHECK(left_out_line(4, {0, 1}, {"n1", "n2", ""}) ==
        "the first round closed without 2 of the step's 4 nodes: node rank 2, node rank 3 (did not join: a "
        "failed --health-check, or not started in time); the job runs on the other 2");
}
