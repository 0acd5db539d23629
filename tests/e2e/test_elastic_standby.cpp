// Elastic jobs on loopback with shell workers (docs/elastic.md): standbys whatever launched them, agents
// that come after a round closed or after the job ended, restarts that a lost node caused, and a node 0
// that was cut off and comes back (issue 35).
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include "e2e/procs.hpp"
#include "support/paths.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

// Agents of one job on loopback, each started alone (node rank, its own options), running `script`.
struct ShellJob {
  TempDir dir;
  std::string token = "ddprun-standby-" + std::to_string(::getpid()) + "-" + std::to_string(free_port());
  int port = free_port();
  std::string script;
  std::map<int, Proc> agents;  // by node rank

  void start(int node_rank, const std::string& nnodes, std::vector<std::string> extra = {},
             std::map<std::string, std::string> env = {}) {
    std::vector<std::string> argv = {ddprun_test::ddprun_exe(),
                                     "--nnodes",
                                     nnodes,
                                     "--node-rank",
                                     std::to_string(node_rank),
                                     "--rdzv-endpoint",
                                     "127.0.0.1:" + std::to_string(port),
                                     "--nproc-per-node",
                                     "1",
                                     "--term-timeout",
                                     "3",
                                     "--rdzv-timeout",
                                     "120"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    for (const std::string& w : {std::string("--"), std::string("/bin/sh"), std::string("-c"), script})
      argv.push_back(w);
    env["DIR"] = dir.path();
    env["DDPRUN_TEST_TOKEN"] = token;
    agents.emplace(node_rank,
                   ddprun::test::start(argv, env, dir.path(), "agent" + std::to_string(node_rank)));
  }
  // Every file `prefix`0 .. `prefix`n-1 exists (the workers of an attempt started).
  bool files(const std::string& prefix, int n, std::chrono::seconds limit = 120s) {
    for (int r = 0; r < n; ++r) {
      if (!wait_file(dir / (prefix + std::to_string(r)), limit)) {
        for (const auto& [rank, a] : agents) UNSCOPED_INFO("agent " << rank << " so far:\n" << a.err());
        return false;
      }
    }
    return true;
  }
  // Agent `n`'s stderr shows `text` (bounded).
  bool says(int n, const std::string& text, std::chrono::seconds limit = 120s) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (agents.at(n).err().find(text) == std::string::npos) {
      if (std::chrono::steady_clock::now() > end) {
        UNSCOPED_INFO("agent " << n << " so far:\n" << agents.at(n).err());
        return false;
      }
      std::this_thread::sleep_for(20ms);
    }
    return true;
  }
  ~ShellJob() {
    for (auto& [n, a] : agents) wait_for(a, 1ms);
    leftovers_after(token, 1ms);
  }
};

}  // namespace

TEST_CASE("elastic: restarts that lost nodes caused are not restarts without progress", "[e2e][elastic]") {
  // Every attempt reports a higher step; two nodes are lost in a row. With
  // --max-restarts-without-progress 1 the second loss is no stalled restart: the job finishes.
  ShellJob job;
  job.script =
      "n=$TORCHELASTIC_RESTART_COUNT; echo \"step $(( (n + 1) * 100 ))\" > \"$DDPRUN_HEARTBEAT_FILE\"; "
      "touch \"$DIR/ready.$n.$RANK\"; [ \"$n\" -ge 2 ] && exit 0; exec sleep 300";
  for (int n = 0; n < 5; ++n)
    job.start(n, "3:5", {"--max-restarts", "3", "--max-restarts-without-progress", "1"});
  REQUIRE(job.files("ready.0.", 5));
  ::kill(job.agents.at(4).pid, SIGKILL);
  REQUIRE(job.files("ready.1.", 4));
  ::kill(job.agents.at(3).pid, SIGKILL);
  for (int n : {0, 1, 2}) {
    REQUIRE(wait_for(job.agents.at(n), 180s));
    INFO("agent " << n << ": " << job.agents.at(n).err());
    CHECK(job.agents.at(n).code == 0);
    CHECK_THAT(job.agents.at(n).err(), !Catch::Contains("no progress"));
  }
  CHECK(job.files("ready.2.", 3, 1s));
  CHECK(leftovers_after(job.token, 10s).empty());
}

TEST_CASE(
    "elastic: an agent that comes after the round closed waits as a standby and takes a lost node's place",
    "[e2e][elastic]") {
  // torchrun's rule, outside Slurm too: five agents of --nnodes 4:4, the fifth started once the job runs.
  ShellJob job;
  job.script =
      "n=$TORCHELASTIC_RESTART_COUNT; echo \"$WORLD_SIZE $GROUP_RANK\" > \"$DIR/world.$n.$RANK\"; "
      "touch \"$DIR/ready.$n.$RANK\"; [ \"$n\" -ge 1 ] && exit 0; exec sleep 300";
  for (int n = 0; n < 4; ++n) job.start(n, "4:4", {"--max-restarts", "2"});
  REQUIRE(job.files("ready.0.", 4));
  job.start(4, "4:4", {"--max-restarts", "2"});
  REQUIRE(job.says(4, "waits as a standby for the next round"));
  ::kill(job.agents.at(1).pid, SIGKILL);
  for (int n : {0, 2, 3, 4}) {
    REQUIRE(wait_for(job.agents.at(n), 180s));
    INFO("agent " << n << ": " << job.agents.at(n).err());
    CHECK(job.agents.at(n).code == 0);
  }
  // The restart ran at MAX: the standby that came late is node rank 3 of the new round.
  REQUIRE(job.files("world.1.", 4, 1s));
  CHECK(read_file(job.dir / "world.1.3") == "4 3\n");
  CHECK_THAT(job.agents.at(0).err(), Catch::Contains("attempt 1: lost") && Catch::Contains("(node rank 1)") &&
                                         Catch::Contains("(it came late) promoted to node rank 3"));
  CHECK_THAT(job.agents.at(4).err(), !Catch::Contains("the round closed without this node"));
  CHECK(leftovers_after(job.token, 10s).empty());
}

TEST_CASE("elastic: a standby that came late is told when the job ends and leaves with its exit code",
          "[e2e][elastic]") {
  ShellJob job;
  job.script = "touch \"$DIR/ready.$RANK\"; while [ ! -e \"$DIR/go\" ]; do sleep 0.1; done";
  for (int n = 0; n < 2; ++n) job.start(n, "2:2", {"--max-restarts", "1"});
  REQUIRE(job.files("ready.", 2));
  job.start(2, "2:2", {"--max-restarts", "1"});
  REQUIRE(job.says(2, "waits as a standby for the next round"));
  std::ofstream(job.dir / "go").close();
  for (int n = 0; n < 3; ++n) {
    REQUIRE(wait_for(job.agents.at(n), 60s));
    INFO("agent " << n << ": " << job.agents.at(n).err());
    CHECK(job.agents.at(n).code == 0);
  }
  CHECK(leftovers_after(job.token, 10s).empty());
}

TEST_CASE("elastic: a standby takes the place of a node whose health check fails, outside Slurm too",
          "[e2e][elastic][health]") {
  // Three agents of --nnodes 2:2 --max-restarts 1; node rank 1's check fails: node rank 2 (a standby) runs.
  ShellJob job;
  job.script = "echo \"$WORLD_SIZE\" > \"$DIR/world.$RANK\"";
  const std::vector<std::string> opts = {"--max-restarts", "1", "--health-check",
                                         "test \"$NODE\" != 1 || { echo 'GPU 1: ECC errors'; exit 4; }"};
  for (int n = 0; n < 3; ++n) job.start(n, "2:2", opts, {{"NODE", std::to_string(n)}});
  for (auto& [n, a] : job.agents) REQUIRE(wait_for(a, 120s));
  {
    INFO(job.agents.at(1).err());
    CHECK(job.agents.at(1).code == 125);
    CHECK_THAT(job.agents.at(1).err(),
               Catch::Contains("failed its health check") && Catch::Contains("ECC errors"));
  }
  for (int n : {0, 2}) {
    INFO("agent " << n << ": " << job.agents.at(n).err());
    CHECK(job.agents.at(n).code == 0);
  }
  CHECK(read_file(job.dir / "world.0") == "2\n");
  CHECK(read_file(job.dir / "world.1") == "2\n");
}

TEST_CASE("elastic: an agent whose health check outlasts the job learns that it ended and leaves at once",
          "[e2e][elastic][health]") {
  // A standby whose check takes minutes: the job (4:4) ends long before; the standby must not hold its
  // node (under Slurm: the allocation) until the check and then --rdzv-timeout are over.
  ShellJob job;
  job.script = "touch \"$DIR/ready.$RANK\"; while [ ! -e \"$DIR/go\" ]; do sleep 0.1; done";
  for (int n = 0; n < 4; ++n) job.start(n, "4:4", {"--max-restarts", "1"});
  REQUIRE(job.files("ready.", 4));
  job.start(4, "4:4",
            {"--max-restarts", "1", "--health-check", "touch \"$DIR/checking\"; exec sleep 300",
             "--health-check-timeout", "600"});
  REQUIRE(wait_file(job.dir / "checking", 60s));
  std::ofstream(job.dir / "go").close();
  for (int n = 0; n < 4; ++n) REQUIRE(wait_for(job.agents.at(n), 60s));
  REQUIRE(wait_for(job.agents.at(4), 30s));
  INFO(job.agents.at(4).err());
  CHECK(job.agents.at(4).code == 0);
  CHECK_THAT(job.agents.at(4).err(), Catch::Contains("the job ended with exit code 0 before this node"));
  CHECK(leftovers_after(job.token, 10s).empty());
}

namespace {

// Four agents of --nnodes 3:4 whose first attempt runs until torn down, and whose restart waits for the
// file "go" and exits 0.
void start_cut_off_job(ShellJob& job) {
  job.script =
      "n=$TORCHELASTIC_RESTART_COUNT; touch \"$DIR/ready.$n.$RANK\"; [ \"$n\" = 0 ] && exec sleep 300; "
      "while [ ! -e \"$DIR/go\" ]; do sleep 0.1; done";
  for (int n = 0; n < 4; ++n) job.start(n, "3:4", {"--max-restarts", "2"});
}

}  // namespace

TEST_CASE("elastic: a node 0 that was stopped comes back, says it was cut off and follows the job to its end",
          "[e2e][elastic]") {
  ShellJob job;
  start_cut_off_job(job);
  REQUIRE(job.files("ready.0.", 4));
  ::kill(job.agents.at(0).pid, SIGSTOP);
  // The others declare node 0 lost (its silence), the first survivor serves a fresh store, and the
  // restart runs on three nodes.
  REQUIRE(job.files("ready.1.", 3));
  ::kill(job.agents.at(0).pid, SIGCONT);
  REQUIRE(job.says(0, "waits as a standby"));
  std::ofstream(job.dir / "go").close();
  for (int n = 0; n < 4; ++n) {
    REQUIRE(wait_for(job.agents.at(n), 120s));
    INFO("agent " << n << ": " << job.agents.at(n).err());
    CHECK(job.agents.at(n).code == 0);
  }
  const std::string err = job.agents.at(0).err();
  CHECK_THAT(err, Catch::Contains("it was cut off, and the job went on without it") &&
                      Catch::Contains("it follows the job at "));
  CHECK_THAT(err, !Catch::Contains("fewer than the minimum"));
  CHECK(leftovers_after(job.token, 10s).empty());
}

TEST_CASE("elastic: a node 0 stopped until the job ended learns its exit code when it comes back",
          "[e2e][elastic]") {
  ShellJob job;
  start_cut_off_job(job);
  REQUIRE(job.files("ready.0.", 4));
  ::kill(job.agents.at(0).pid, SIGSTOP);
  REQUIRE(job.files("ready.1.", 3));
  std::ofstream(job.dir / "go").close();
  for (int n = 1; n < 4; ++n) {
    REQUIRE(wait_for(job.agents.at(n), 120s));
    INFO("agent " << n << ": " << job.agents.at(n).err());
    CHECK(job.agents.at(n).code == 0);
  }
  ::kill(job.agents.at(0).pid, SIGCONT);
  REQUIRE(wait_for(job.agents.at(0), 60s));
  const std::string err = job.agents.at(0).err();
  INFO(err);
  CHECK(job.agents.at(0).code == 0);
  CHECK_THAT(err, Catch::Contains("it was cut off") &&
                      Catch::Contains("the job ended with exit code 0 while this node was cut off"));
  CHECK_THAT(err, !Catch::Contains("fewer than the minimum"));
  CHECK(leftovers_after(job.token, 10s).empty());
}
