// --health-check: every agent runs the check before it joins; a node that fails it (or whose check
// hangs past --health-check-timeout) ends a fail-fast job on every node at once, before any worker.
#include <catch2/catch.hpp>

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "e2e/job.hpp"
#include "support/paths.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

// `count` agents of `--nnodes nnodes`; NODE differs per node as SLURM_NODEID does under Slurm. Each
// worker leaves a file (started.RANK, or what `worker` writes).
void start_agents(Job& job, int count, const std::string& nnodes, const std::string& check,
                  const std::vector<std::string>& more = {},
                  const std::string& worker = "touch \"$DIR/started.$RANK\"") {
  for (int n = 0; n < count; ++n) {
    std::vector<std::string> argv = {ddprun_test::ddprun_exe(), "--nnodes", nnodes, "--node-rank",
                                     std::to_string(n), "--rdzv-endpoint",
                                     "127.0.0.1:" + std::to_string(job.port), "--nproc-per-node", "1",
                                     // Far above the test's wait: an agent that waited for it fails the test.
                                     "--rdzv-timeout", "600", "--term-timeout", "3", "--health-check", check};
    argv.insert(argv.end(), more.begin(), more.end());
    for (const std::string& w : {std::string("--"), std::string("/bin/sh"), std::string("-c"), worker})
      argv.push_back(w);
    std::map<std::string, std::string> vars = {
        {"DDPRUN_TEST_TOKEN", job.token}, {"DIR", job.dir.path()}, {"NODE", std::to_string(n)}};
    job.agents.push_back(ddprun::test::start(argv, vars, job.dir.path(), "agent" + std::to_string(n)));
  }
}

void start_two(Job& job, const std::string& check, const std::vector<std::string>& more = {}) {
  start_agents(job, 2, "2", check, more);
}

// A check that counts its runs on each node (checks.NODE) and fails from its second run on node 1 only:
// healthy at the start, sick at the restart.
const std::string kSickAtRestart =
    "n=$(cat \"$DIR/checks.$NODE\" 2>/dev/null || echo 0); echo $((n + 1)) > \"$DIR/checks.$NODE\"; "
    "test \"$NODE\" != 1 || test \"$n\" = 0 || { echo 'GPU 0 fell off the bus'; exit 4; }";
// Attempt 0's workers fail (exit 3), so that the job restarts; every attempt's worker leaves a file.
const std::string kFailFirstAttempt =
    "touch \"$DIR/started.$RANK.$TORCHELASTIC_RESTART_COUNT\"; [ \"$TORCHELASTIC_RESTART_COUNT\" != 0 ] || "
    "exit 3";

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::string s;
  std::getline(in, s);
  return s;
}

bool any_started(const std::string& dir) {
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("started.", 0) == 0) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("health check: a node that fails it ends the job on every node at once, no worker starts",
          "[e2e][health]") {
  Job job;
  start_two(job, "test \"$NODE\" != 1 || { echo 'GPU 3: ECC errors'; echo 'only 7 of 8 GPUs'; exit 7; }");
  for (auto& a : job.agents) REQUIRE(wait_for(a, 120s));
  for (auto& a : job.agents) {
    INFO(a.err());
    CHECK(a.code == 125);
    CHECK_THAT(a.err(), Catch::Contains("node 1 (") && Catch::Contains("failed its health check") &&
                            Catch::Contains("exited with code 7") &&
                            Catch::Contains("GPU 3: ECC errors | only 7 of 8 GPUs"));
  }
  CHECK_FALSE(any_started(job.dir.path()));
}

TEST_CASE("health check: a check that hangs is killed with its group at the timeout", "[e2e][health]") {
  TempDir dir;
  Proc p = start({ddprun_test::ddprun_exe(), "--standalone", "--nproc-per-node", "1", "--health-check",
                  "echo probing; sleep 600 & echo $! > \"$DIR/bg.pid\"; wait", "--health-check-timeout", "1",
                  "--", "/bin/sh", "-c", "touch \"$DIR/started.0\""},
                 {{"DIR", dir.path()}}, dir.path(), "ddprun");
  REQUIRE(wait_for(p, 120s));
  INFO(p.err());
  CHECK(p.code == 125);
  CHECK_THAT(p.err(), Catch::Contains("timed out after 1 s") && Catch::Contains("output: probing"));
  CHECK_FALSE(any_started(dir.path()));
  std::ifstream in(dir.path() / "bg.pid");
  int pid = 0;
  REQUIRE(in >> pid);
  // The check's background sleep went with it (once init has reaped it).
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    gone = !std::filesystem::exists("/proc/" + std::to_string(pid));
    if (!gone) std::this_thread::sleep_for(50ms);
  }
  CHECK(gone);
}

TEST_CASE("health check: a passing check changes nothing", "[e2e][health]") {
  Job job;
  start_two(job, "echo healthy", {"--health-check-timeout", "30"});
  for (auto& a : job.agents) REQUIRE(wait_for(a, 120s));
  for (auto& a : job.agents) {
    INFO(a.err());
    CHECK(a.code == 0);
  }
  CHECK(std::filesystem::exists(job.dir.path() / "started.0"));
  CHECK(std::filesystem::exists(job.dir.path() / "started.1"));
}

TEST_CASE(
    "health check: it runs again before a restart and a fail-fast job ends there with 125 on every node",
    "[e2e][health]") {
  Job job;
  start_agents(job, 2, "2", kSickAtRestart, {"--max-restarts", "1"}, kFailFirstAttempt);
  for (auto& a : job.agents) REQUIRE(wait_for(a, 120s));
  // Each node ran the check twice: before the first round and before the restart's.
  CHECK(read_file(job.dir.path() / "checks.0") == "2");
  CHECK(read_file(job.dir.path() / "checks.1") == "2");
  CHECK_FALSE(std::filesystem::exists(job.dir.path() / "started.0.1"));
  CHECK_FALSE(std::filesystem::exists(job.dir.path() / "started.1.1"));
  for (auto& a : job.agents) {
    INFO(a.err());
    CHECK(a.code == 125);
    // Attempt 0 ran and failed (a worker killed by the teardown may not have left its file).
    CHECK_THAT(a.err(), Catch::Contains("attempt 0 failed (exit 3); restarting"));
    CHECK_THAT(a.err(), Catch::Contains("node 1 (") && Catch::Contains("failed its health check") &&
                            Catch::Contains("exited with code 4; output: GPU 0 fell off the bus"));
  }
}

TEST_CASE("health check: an elastic job's restart goes on without the node whose check fails then",
          "[e2e][health]") {
  Job job;
  // Three nodes, at least two: one left out of the restart is a loss the job survives.
  start_agents(job, 3, "2:3", kSickAtRestart, {"--max-restarts", "1"}, kFailFirstAttempt);
  for (auto& a : job.agents) REQUIRE(wait_for(a, 120s));
  for (int n = 0; n < 3; ++n) CHECK(read_file(job.dir.path() / ("checks." + std::to_string(n))) == "2");
  {
    INFO(job.agents[1].err());
    CHECK(job.agents[1].code == 125);
    CHECK_THAT(job.agents[1].err(),
               Catch::Contains("failed its health check") &&
                   Catch::Contains("exited with code 4; output: GPU 0 fell off the bus"));
  }
  for (int n : {0, 2}) {
    INFO(job.agents[static_cast<std::size_t>(n)].err());
    CHECK(job.agents[static_cast<std::size_t>(n)].code == 0);
  }
  // The restart ran on the two others: ranks 0 and 1 of a world of 2.
  CHECK(std::filesystem::exists(job.dir.path() / "started.0.1"));
  CHECK(std::filesystem::exists(job.dir.path() / "started.1.1"));
  CHECK_FALSE(std::filesystem::exists(job.dir.path() / "started.2.1"));
  CHECK_THAT(job.agents[0].err(), Catch::Contains("attempt 1: lost") && Catch::Contains("(node rank 1)"));
}
