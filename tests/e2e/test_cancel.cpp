// A cancel (scancel, a time limit, Ctrl-C: a stopping signal to every agent) ends the job at whatever
// phase it comes: starting, running, node 0 collecting a failed attempt's records, between attempts,
// in a restart's round. Every agent exits 128 + signal within --term-timeout plus a few seconds, no
// worker of a new attempt starts, nothing is left running (docs/agent.md, Signals).
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <thread>

#include "e2e/job.hpp"
#include "support/paths.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

// What scancel does: TERM to every agent at once.
void cancel(Job& job) {
  for (auto& a : job.agents) ::kill(a.pid, SIGTERM);
}

// Every agent ended within `limit` (far above --term-timeout plus a few seconds: only against a
// hang; a node that waits for a round of a cancelled job waits --rdzv-timeout, 60 s here).
void expect_stopped(Job& job, int code = 143, std::chrono::milliseconds limit = 40s) {
  for (std::size_t n = 0; n < job.agents.size(); ++n) {
    INFO("agent " << n << ":\n" << job.agents[n].err());
    CHECK(wait_for(job.agents[n], limit));
    CHECK(job.agents[n].code == code);
  }
  CHECK(leftovers_after(job.token, 5s).empty());
}

// Every attempt's worker appends its attempt to attempts.RANK.
const std::string kRecord = "echo \"$TORCHELASTIC_RESTART_COUNT\" >> \"$DIR/attempts.$RANK\"; ";
// For rank 1: waits until rank 0 has recorded the attempt, so that a failure of rank 1 never comes before
// rank 0 ran (each test checks that both ranks ran attempt 0).
const std::string kAfterRank0 =
    "for i in $(seq 1 3000); do [ -s \"$DIR/attempts.0\" ] && break; sleep 0.01; done; ";

// Attempt 0: rank 1 fails once ranks 0 and 2 run; rank 0 stops at once on TERM, rank 2 takes 4 s
// (a rank saving its state), so node 0's agent, its own rank gone, collects the attempt's records
// meanwhile. A later attempt would run until stopped.
const std::string kSlowToStop =
    kRecord + "[ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] || exec " + kFake +
    " hang; case $RANK in "
    "0) trap 'touch \"$DIR/stopped.0\"; exit 0' TERM; touch \"$DIR/ready.0\";;"
    "1) while [ ! -f \"$DIR/ready.0\" ] || [ ! -f \"$DIR/ready.2\" ]; do sleep 0.05; done; exit 3;;"
    "2) trap 'touch \"$DIR/stopping.2\"; sleep 4; exit 0' TERM; touch \"$DIR/ready.2\";;"
    "esac; while :; do sleep 0.1; done";

// As Job::start, with --nnodes MIN:MAX (elastic) instead of the agent count.
void start_elastic(Job& job, int agents, const std::string& nnodes, const std::vector<std::string>& command,
                   const std::vector<std::string>& extra) {
  for (int n = 0; n < agents; ++n) {
    std::vector<std::string> argv = {ddprun_test::ddprun_exe(),
                                     "--nnodes",
                                     nnodes,
                                     "--node-rank",
                                     std::to_string(n),
                                     "--rdzv-endpoint",
                                     "127.0.0.1:" + std::to_string(job.port),
                                     "--nproc-per-node",
                                     "1",
                                     "--rdzv-timeout",
                                     "60"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back("--");
    argv.insert(argv.end(), command.begin(), command.end());
    job.agents.push_back(start(argv, {{"DDPRUN_TEST_TOKEN", job.token}, {"DIR", job.dir.path()}},
                               job.dir.path(), "agent" + std::to_string(n)));
  }
}

void cancel_while_node0_collects(Job& job) {
  REQUIRE(wait_file(job.dir / "stopped.0"));
  REQUIRE(wait_file(job.dir / "stopping.2"));
  // Node 0's rank is gone: its agent now gathers the other nodes' records, waiting for node 2's.
  std::this_thread::sleep_for(1s);
  cancel(job);
}

bool one_attempt(const Job& job, int world) {
  for (int r = 0; r < world; ++r) {
    const std::string got = read_file(job.dir / ("attempts." + std::to_string(r)));
    INFO("rank " << r << " ran attempts: " << got);
    if (got != "0\n") return false;
  }
  return true;
}

}  // namespace

TEST_CASE("cancel while starting: a health check in progress is stopped with its children, exit 143",
          "[e2e][signals][cancel]") {
  Job job;
  // The check forks (sleep is not the shell itself), as real checks do.
  job.start(2, 1, sh(kRecord), {"--health-check", "touch \"$DIR/checking.$$\"; sleep 120; true"});
  for (;;) {
    std::size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator(job.dir.path())) {
      if (e.path().filename().string().starts_with("checking.")) ++n;
    }
    if (n == 2) break;
    std::this_thread::sleep_for(20ms);
  }
  cancel(job);
  expect_stopped(job, 143, 20s);
  CHECK_FALSE(std::filesystem::exists(job.dir / "attempts.0"));
}

TEST_CASE("cancel while running: every node exits 143 and nothing restarts", "[e2e][signals][cancel]") {
  Job job;
  job.start(2, 1, sh(kRecord + "touch \"$DIR/ready.$RANK\"; exec " + kFake + " hang"),
            {"--max-restarts", "3"});
  REQUIRE(wait_file(job.dir / "ready.0"));
  REQUIRE(wait_file(job.dir / "ready.1"));
  cancel(job);
  expect_stopped(job);
  CHECK(one_attempt(job, 2));
}

TEST_CASE("cancel while node 0 collects a failed attempt's records: no restart, every node exits 143",
          "[e2e][signals][cancel]") {
  Job job;
  job.start(3, 1, sh(kSlowToStop), {"--max-restarts", "3", "--term-timeout", "5"});
  cancel_while_node0_collects(job);
  expect_stopped(job);
  CHECK(one_attempt(job, 3));
  CHECK_THAT(job.agents[0].err(), Catch::Contains("SIGTERM received: attempt 0 (exit 3) is not restarted; "
                                                  "exit code 143"));
  CHECK_THAT(job.agents[0].err(), !Catch::Contains("restarting"));
}

TEST_CASE("cancel while node 0 collects, elastic: no new round, no lost node, every node exits 143",
          "[e2e][signals][cancel][elastic]") {
  Job job;
  start_elastic(job, 3, "2:3", sh(kSlowToStop), {"--max-restarts", "3", "--term-timeout", "5"});
  cancel_while_node0_collects(job);
  expect_stopped(job);
  CHECK(one_attempt(job, 3));
  CHECK_THAT(job.agents[0].err(), !Catch::Contains("lost"));
}

TEST_CASE("cancel between a failed attempt and its restart: every node exits 143, no new attempt",
          "[e2e][signals][cancel]") {
  // The test hook raises SIGTERM in each agent the moment its run has ended.
  Job job;
  job.env["DDPRUN_TEST_RAISE_AFTER_RUN"] = "15";
  job.start(2, 1,
            sh(kRecord + "if [ $RANK = 1 ]; then " + kAfterRank0 + "exit 7; fi; exec " + kFake + " hang"),
            {"--max-restarts", "3"});
  expect_stopped(job);
  CHECK(one_attempt(job, 2));
}

TEST_CASE("cancel in a restart's round: the waiting node and the node in its health check exit 143",
          "[e2e][signals][cancel]") {
  Job job;
  // Node 1's check is slow once attempt 0 failed: node 0 waits in the restart's round meanwhile.
  job.extra_of[1] = {"--health-check",
                     "[ -f \"$DIR/failed\" ] || exit 0; touch \"$DIR/checking\"; sleep 120; true"};
  job.start(2, 1,
            sh(kRecord + "if [ $RANK = 1 ]; then " + kAfterRank0 +
               "touch \"$DIR/failed\"; exit 3; fi; exec " + kFake + " hang"),
            {"--max-restarts", "3"});
  REQUIRE(wait_file(job.dir / "checking"));
  cancel(job);
  expect_stopped(job);
  CHECK(one_attempt(job, 2));
}
