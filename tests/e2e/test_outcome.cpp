// The job's outcome is the same on every node, whatever the order in which the nodes finish: a node
// whose ranks all exited 0 stays in the job until every node got there or one of them failed, a stop
// while it waits reaches every node, and a lost node in a fail-fast job is named as such.
#include <catch2/catch.hpp>

#include <csignal>
#include <fstream>
#include <regex>

#include "e2e/job.hpp"
#include "support/paths.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

// Waits for p to exit, at most `limit`, without killing it (the test then decides what to do).
bool exits_within(Proc& p, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!exited(p)) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

// Rank 0 (node 0) exits 0 at once; rank 1 (node 1) exits 3 once rank 0 is gone, so that node 0 is
// done, and usually waiting at the exit barrier, when the failure comes. Each attempt alike.
std::vector<std::string> rank1_fails_after_rank0_finished() {
  return sh(
      "echo x >> \"$DIR/runs_$RANK\"; if [ \"$RANK\" = 0 ]; then touch "
      "\"$DIR/done_$TORCHELASTIC_RESTART_COUNT\"; "
      "exit 0; fi; for i in $(seq 1 3000); do [ -e \"$DIR/done_$TORCHELASTIC_RESTART_COUNT\" ] && break; "
      "sleep 0.01; done; sleep 1; exit 3");
}

}  // namespace

TEST_CASE("a node whose ranks all finished reports a later failure on another node and exits with its code",
          "[e2e][outcome]") {
  Job job;
  job.start(2, 1, rank1_fails_after_rank0_finished());
  job.wait_all();
  for (auto& a : job.agents) {
    INFO(a.err());
    CHECK(a.code == 3);
  }
  const std::string lead = job.agents[0].err();
  INFO(lead);
  CHECK_THAT(lead, Catch::Contains("job summary (attempt 0): FAILED, exit code 3, root cause rank 1"));
  CHECK_THAT(lead, !Catch::Contains("success") && !Catch::Contains("exit barrier"));
  static const std::regex kRow0(R"(\n +0  \S+ +0 +exited 0 )");  // its rank did not fail, nor was it stopped
  CHECK(std::regex_search(lead, kRow0));
  CHECK(leftovers_after(job.token, 5s).empty());
}

TEST_CASE("a node whose ranks all finished comes back for the restart another node's failure starts",
          "[e2e][outcome][restart]") {
  Job job;
  job.start(2, 1, rank1_fails_after_rank0_finished(), {"--max-restarts", "1"});
  job.wait_all();
  for (auto& a : job.agents) {
    INFO(a.err());
    CHECK(a.code == 3);
  }
  // Both attempts ran on both nodes: the finished node did not leave the job after attempt 0.
  CHECK(read_file(job.dir / "runs_0") == "x\nx\n");
  CHECK(read_file(job.dir / "runs_1") == "x\nx\n");
  CHECK_THAT(job.agents[0].err(), Catch::Contains("attempt 0 failed (exit 3); restarting (1 of 1)"));
  CHECK(leftovers_after(job.token, 5s).empty());
}

TEST_CASE("SIGTERM to an agent waiting at the exit barrier ends it at once and stops every node alike",
          "[e2e][outcome][signals]") {
  Job job;
  // Node 0's rank is done; node 1's runs until the test says "go" (never, unless the stop is ignored).
  job.start(2, 1,
            sh("if [ \"$RANK\" = 0 ]; then touch \"$DIR/done_0\"; exit 0; fi; touch \"$DIR/ready_1\"; exec " +
               kFake + " wait-file \"$DIR/go\""));
  REQUIRE(wait_file(job.dir / "done_0"));
  REQUIRE(wait_file(job.dir / "ready_1"));
  std::this_thread::sleep_for(500ms);  // node 0 reaches its exit barrier (a TERM before it ends alike)
  ::kill(job.agents[0].pid, SIGTERM);
  // A generous bound only against a hang: a stop ignored until the barrier would wait for "go".
  const bool stopped = exits_within(job.agents[0], 60s);
  std::ofstream(job.dir / "go").put('\n');
  job.wait_all();
  CHECK(stopped);
  for (auto& a : job.agents) {
    INFO(a.err());
    CHECK(a.code == 143);
    CHECK_THAT(a.err(), !Catch::Contains("success"));
  }
  CHECK_THAT(job.agents[1].err(), Catch::Contains("received SIGTERM"));
  CHECK(leftovers_after(job.token, 5s).empty());
}

TEST_CASE("a lost node in a fail-fast job without restarts is named: the job is not elastic",
          "[e2e][outcome]") {
  Job job;
  job.start(2, 1, sh("touch \"$DIR/ready_$RANK\"; exec " + kFake + " hang"));
  REQUIRE(wait_file(job.dir / "ready_0"));
  REQUIRE(wait_file(job.dir / "ready_1"));
  ::kill(job.agents[1].pid, SIGKILL);
  REQUIRE(wait_for(job.agents[0], 60s));
  const std::string err = job.agents[0].err();
  INFO(err);
  CHECK(job.agents[0].code == 1);
  CHECK_THAT(err, Catch::Contains("(node rank 1); the job is not elastic"));
  CHECK(leftovers_after(job.token, 5s).empty());
}

TEST_CASE("after SIGUSR1 every rank stops on its own: node 0's job summary says so, with every node's row",
          "[e2e][outcome][signals]") {
  // Each rank exits 140 as soon as its agent forwards SIGUSR1. The grace after the signal (--term-timeout
  // 10) outlasts the heartbeat timeout (5 s); node 1 gets its signal later than node 0, so it is still in its
  // grace when node 0's has ended. It is heard meanwhile, so node 0 waits for its record.
  Job job;
  for (int n = 0; n < 2; ++n) {
    job.agents.push_back(
        start({ddprun_test::ddprun_exe(), "--nnodes", "2", "--node-rank", std::to_string(n),
               "--rdzv-endpoint", "127.0.0.1:" + std::to_string(job.port), "--term-timeout", "10", "--",
               kFake, "exit-on", "10", "0", "140", "touch", job.dir / ("ready_" + std::to_string(n)), "hang"},
              {{"DDPRUN_TEST_TOKEN", job.token}}, job.dir.path(), "agent" + std::to_string(n)));
  }
  REQUIRE(wait_file(job.dir / "ready_0"));
  REQUIRE(wait_file(job.dir / "ready_1"));
  ::kill(job.agents[0].pid, SIGUSR1);  // srun passes it to every agent, not always at the same moment
  std::this_thread::sleep_for(3s);
  ::kill(job.agents[1].pid, SIGUSR1);
  job.wait_all();
  for (auto& a : job.agents) {
    INFO(a.err());
    CHECK(a.code == 140);
  }
  const std::string lead = job.agents[0].err();
  INFO(lead);
  CHECK_THAT(lead, Catch::Contains("job summary (attempt 0): stopped after SIGUSR1 with exit code 140"));
  CHECK_THAT(lead, !Catch::Contains("FAILED") && !Catch::Contains("no report"));
  static const std::regex kRow0(R"(\n +0  \S+ +0 +rank 0: exit 140)");
  static const std::regex kRow1(R"(\n +1  \S+ +1 +rank 1: exit 140)");
  CHECK(std::regex_search(lead, kRow0));
  CHECK(std::regex_search(lead, kRow1));
  CHECK(leftovers_after(job.token, 5s).empty());
}

TEST_CASE("srun's TERM during a hang's teardown is not reported as the cause: the hang is",
          "[e2e][outcome][signals][hang]") {
  // srun --kill-on-bad-exit TERMs node 0 once another node has exited 124; node 0's rank is still
  // stopping (it takes 3 s).
  Job job;
  job.start(2, 1,
            sh("trap 'touch \"$DIR/stopping.$RANK\"; sleep 3; exit 0' TERM; while :; do sleep 0.1; done"),
            {"--hang-timeout", "2"});
  REQUIRE(wait_file(job.dir / "stopping.0", 60s));
  ::kill(job.agents[0].pid, SIGTERM);
  job.wait_all();
  const std::string lead = job.agents[0].err();
  INFO(lead);
  CHECK(job.agents[0].code == 124);
  CHECK_THAT(lead, Catch::Contains("job hung with exit code 124"));
  CHECK_THAT(lead, !Catch::Contains("received by ddprun") && !Catch::Contains("ddprun got SIGTERM"));
  CHECK(leftovers_after(job.token, 5s).empty());
}

TEST_CASE("a node lost while it waits at the exit barrier is the root cause, not the TERM that follows",
          "[e2e][outcome][signals]") {
  // Node 2's rank is done; its agent dies at the exit barrier; srun --kill-on-bad-exit then TERMs the
  // other agents, whose ranks still run.
  Job job;
  job.start(3, 1, sh("if [ \"$RANK\" = 2 ]; then touch \"$DIR/done\"; exit 0; fi; exec " + kFake + " hang"));
  REQUIRE(wait_file(job.dir / "done"));
  std::this_thread::sleep_for(1s);  // node 2's agent reaches its exit barrier
  ::kill(job.agents[2].pid, SIGKILL);
  std::this_thread::sleep_for(1s);  // srun notices the task's end
  ::kill(job.agents[0].pid, SIGTERM);
  ::kill(job.agents[1].pid, SIGTERM);
  job.wait_all();
  for (std::size_t n : {0u, 1u}) {
    INFO("agent " << n << ":\n" << job.agents[n].err());
    CHECK(job.agents[n].code == 1);
    CHECK_THAT(job.agents[n].err(), Catch::Contains("(node rank 2) at the exit barrier, its ranks done"));
    CHECK_THAT(job.agents[n].err(), !Catch::Contains("received SIGTERM"));
  }
  CHECK(leftovers_after(job.token, 5s).empty());
}
