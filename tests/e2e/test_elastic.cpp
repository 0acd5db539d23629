// Elastic jobs on loopback (docs/elastic.md): real agents, real PyTorch workers (gloo) that start
// children. A lost agent (SIGKILL) no longer ends the job: the survivors restart at once at the new
// world size, a standby takes the lost node's place, or the first survivor takes over the store.
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <thread>

#include "e2e/procs.hpp"
#include "support/paths.hpp"
#include "support/torch_python.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

const std::string kWorker = ddprun_test::source_dir() + "/tests/e2e/elastic_worker.py";

struct ElasticJob {
  std::string python = torch_python();  // first: it may end the test binary (skipped) before anything starts
  TempDir dir;
  std::string token = "ddprun-elastic-" + std::to_string(::getpid()) + "-" + std::to_string(free_port());
  int port = free_port();
  std::map<int, Proc> agents;  // by node rank

  void start(int node_rank, const std::string& nnodes, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {ddprun_test::ddprun_exe(),
                                     "--nnodes",
                                     nnodes,
                                     "--node-rank",
                                     std::to_string(node_rank),
                                     "--rdzv-endpoint",
                                     "127.0.0.1:" + std::to_string(port),
                                     "--max-restarts",
                                     "2",
                                     "--term-timeout",
                                     "3",
                                     "--rdzv-timeout",
                                     "120",
                                     "--python",
                                     python};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back(kWorker);
    agents.emplace(node_rank, ddprun::test::start(argv, {{"DIR", dir.path()}, {"DDPRUN_TEST_TOKEN", token}},
                                                  dir.path(), "agent" + std::to_string(node_rank)));
  }
  // Every worker of the first attempt is running (ranks 0..n-1).
  bool ready(int n) {
    for (int r = 0; r < n; ++r) {
      if (!wait_file(dir / ("ready_" + std::to_string(r)), 120s)) {
        for (const auto& [rank, a] : agents) UNSCOPED_INFO("agent " << rank << " so far:\n" << a.err());
        return false;
      }
    }
    return true;
  }
  // What rank r recorded after the restart: "world restart allreduce master_addr".
  std::string done(int r) { return read_file(dir / ("done_" + std::to_string(r))); }
  ~ElasticJob() {
    for (auto& [n, a] : agents) wait_for(a, 1ms);
    leftovers_after(token, 1ms);
  }
};

}  // namespace

TEST_CASE("elastic: losing a node shrinks the job and the survivors finish at the new world size",
          "[e2e][elastic][torch2]") {
  ElasticJob job;
  for (int n = 0; n < 4; ++n) job.start(n, "3:4");
  REQUIRE(job.ready(4));
  ::kill(job.agents.at(2).pid, SIGKILL);
  for (int n : {0, 1, 3}) {
    REQUIRE(wait_for(job.agents.at(n), 180s));
    INFO("agent " << n << ": " << job.agents.at(n).err());
    CHECK(job.agents.at(n).code == 0);
  }
  for (int r = 0; r < 3; ++r) CHECK(job.done(r).starts_with("3 1 3 "));  // world 3, restart 1, all-reduce 3
  CHECK_FALSE(std::filesystem::exists(job.dir / "done_3"));
  const std::string master = job.agents.at(0).err();
  CHECK_THAT(master, Catch::Contains("lost the agent on") && Catch::Contains("(node rank 2)"));
  CHECK_THAT(master, Catch::Contains("attempt 1: lost") && Catch::Contains("world size 3 (was 4)"));
  CHECK_THAT(master,
             Catch::Contains("ddprun: attempts: 0 (world size 4) failed, exit 1: lost the agent on") &&
                 Catch::Contains("; 1 (world size 3) succeeded"));
  CHECK(leftovers_after(job.token, 10s).empty());
}

TEST_CASE("elastic: a standby takes a lost node's place and the world stays at MAX",
          "[e2e][elastic][torch2]") {
  ElasticJob job;
  job.start(0, "4:4", {"--log-format", "json"});
  job.start(4, "4:4");  // node rank 4 >= MAX: a standby
  // The standby joins before the fourth active node closes the round: the master's first
  // rendezvous_waiting event (10 s into the wait) counts it, as nodes 1-3 have not started yet.
  const auto end = std::chrono::steady_clock::now() + 120s;
  while (job.agents.at(0).err().find("2 of 4 node(s) joined") == std::string::npos &&
         std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(20ms);
  }
  INFO("master so far: " << job.agents.at(0).err());
  REQUIRE_THAT(job.agents.at(0).err(), Catch::Contains("\"event\":\"rendezvous_waiting\"") &&
                                           Catch::Contains("2 of 4 node(s) joined"));
  for (int n = 1; n < 4; ++n) job.start(n, "4:4");
  REQUIRE(job.ready(4));
  ::kill(job.agents.at(1).pid, SIGKILL);
  for (int n : {0, 2, 3, 4}) {
    REQUIRE(wait_for(job.agents.at(n), 180s));
    INFO("agent " << n << ": " << job.agents.at(n).err() << job.agents.at(n).out());
    CHECK(job.agents.at(n).code == 0);
  }
  for (int r = 0; r < 4; ++r) CHECK(job.done(r).starts_with("4 1 4 "));
  const std::string events = job.agents.at(0).out() + job.agents.at(0).err();
  CHECK_THAT(events, Catch::Contains("\"event\":\"node_lost\"") &&
                         Catch::Contains("\"event\":\"spare_promoted\"") &&
                         Catch::Contains("\"event\":\"membership_changed\""));
  CHECK_THAT(events, Catch::Contains("\"new_node_rank\":3"));
  CHECK(leftovers_after(job.token, 10s).empty());
}

TEST_CASE("elastic: losing the master's node moves the store to the first survivor",
          "[e2e][elastic][torch2]") {
  ElasticJob job;
  for (int n = 0; n < 4; ++n) job.start(n, "3:4");
  REQUIRE(job.ready(4));
  ::kill(job.agents.at(0).pid, SIGKILL);
  for (int n : {1, 2, 3}) {
    REQUIRE(wait_for(job.agents.at(n), 180s));
    INFO("agent " << n << ": " << job.agents.at(n).err());
    CHECK(job.agents.at(n).code == 0);
  }
  for (int r = 0; r < 3; ++r) CHECK(job.done(r).starts_with("3 1 3 "));
  const std::string new_master = job.agents.at(1).err();
  CHECK_THAT(new_master, Catch::Contains("lost the rendezvous store") && Catch::Contains("attempt 1: lost"));
  CHECK_THAT(new_master, Catch::Contains("(node rank 0)"));
  CHECK(leftovers_after(job.token, 10s).empty());
}

TEST_CASE(
    "elastic: a silent node (SIGSTOP) is lost after the heartbeat timeout and the job goes on without it",
    "[e2e][elastic]") {
  ElasticJob job;
  for (int n = 0; n < 4; ++n) job.start(n, "3:4");
  REQUIRE(job.ready(4));
  ::kill(job.agents.at(3).pid, SIGSTOP);
  for (int n : {0, 1, 2}) {
    REQUIRE(wait_for(job.agents.at(n), 180s));
    INFO("agent " << n << ": " << job.agents.at(n).err());
    CHECK(job.agents.at(n).code == 0);
  }
  for (int r = 0; r < 3; ++r) CHECK(job.done(r).starts_with("3 1 3 "));
  CHECK_THAT(job.agents.at(0).err(), Catch::Contains("(node rank 3): no heartbeat"));
  // Resumed, the stopped agent finds the job gone on without it: it stops its workers and fails.
  ::kill(job.agents.at(3).pid, SIGCONT);
  REQUIRE(wait_for(job.agents.at(3), 60s));
  CHECK(job.agents.at(3).code != 0);
  CHECK(leftovers_after(job.token, 10s).empty());
}

TEST_CASE("elastic: below MIN every survivor fails with the lost nodes and MIN named", "[e2e][elastic]") {
  ElasticJob job;
  for (int n = 0; n < 4; ++n) job.start(n, "3:4");
  REQUIRE(job.ready(4));
  ::kill(job.agents.at(2).pid, SIGKILL);
  ::kill(job.agents.at(3).pid, SIGKILL);
  for (int n : {0, 1}) {
    REQUIRE(wait_for(job.agents.at(n), 180s));
    const std::string err = job.agents.at(n).err();
    INFO("agent " << n << ": " << err);
    CHECK(job.agents.at(n).code == 1);
    CHECK_THAT(err, Catch::Contains("fewer than the minimum of 3 (--nnodes 3:MAX)"));
    CHECK_THAT(err, Catch::Contains("(node rank 2)") && Catch::Contains("(node rank 3)"));
  }
  CHECK_FALSE(std::filesystem::exists(job.dir / "done_0"));
  CHECK(leftovers_after(job.token, 10s).empty());
}

TEST_CASE("elastic: a fixed-size job with restarts and no standby ends when a node is lost, saying why",
          "[e2e][elastic]") {
  // --max-restarts makes any job elastic (a standby that came would take the place); none came, so the
  // job is short of MIN, which the line says: never "not elastic".
  ElasticJob job;
  for (int n = 0; n < 3; ++n) job.start(n, "3");
  REQUIRE(job.ready(3));
  ::kill(job.agents.at(1).pid, SIGKILL);
  for (int n : {0, 2}) {
    REQUIRE(wait_for(job.agents.at(n), 60s));
    INFO("agent " << n << ": " << job.agents.at(n).err());
    CHECK(job.agents.at(n).code == 1);
    CHECK_THAT(
        job.agents.at(n).err(),
        Catch::Contains("(node rank 1); 2 nodes left, fewer than the minimum of 3 (--nnodes 3:MAX), and "
                        "no standby was waiting"));
    CHECK_THAT(job.agents.at(n).err(), !Catch::Contains("not elastic"));
  }
  CHECK(leftovers_after(job.token, 10s).empty());
}

TEST_CASE("elastic: a node whose workers take longer than the heartbeat timeout to stop stays in the job",
          "[e2e][elastic]") {
  // Rank 0 (node 0) fails once rank 1 runs; rank 1 (node 1) checkpoints for 8 s on SIGTERM, more than
  // the heartbeat timeout (5 s), well inside --term-timeout. Its agent heartbeats through that
  // teardown, so the next round has both nodes; had it been declared lost, 1 of 2 would be left, no
  // strict majority, and the job would end.
  TempDir dir;
  const std::string token =
      "ddprun-elastic-" + std::to_string(::getpid()) + "-" + std::to_string(free_port());
  const int port = free_port();
  const std::string script =
      "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then "
      "  if [ \"$RANK\" = 1 ]; then exec " +
      ddprun_test::fake_worker() +
      " exit-on 15 8000 0 touch \"$DIR/ready_1\" hang; fi; "
      "  for i in $(seq 1 3000); do [ -e \"$DIR/ready_1\" ] && break; sleep 0.01; done; exit 3; "
      "fi; echo \"$WORLD_SIZE\" > \"$DIR/world_$RANK\"";
  std::vector<Proc> agents;
  for (int n = 0; n < 2; ++n) {
    agents.push_back(start(
        {ddprun_test::ddprun_exe(), "--nnodes", "1:2", "--node-rank", std::to_string(n), "--rdzv-endpoint",
         "127.0.0.1:" + std::to_string(port), "--max-restarts", "2", "--term-timeout", "20", "--rdzv-timeout",
         "120", "--nproc-per-node", "1", "--", "/bin/sh", "-c", script},
        {{"DIR", dir.path()}, {"DDPRUN_TEST_TOKEN", token}}, dir.path(), "agent" + std::to_string(n)));
  }
  for (auto& a : agents) {
    REQUIRE(wait_for(a, 180s));
    INFO(a.err());
    CHECK(a.code == 0);
    CHECK_THAT(a.err(), !Catch::Contains("lost the agent"));
  }
  CHECK(read_file(dir / "world_0") == "2\n");  // the restart ran with both nodes
  CHECK(read_file(dir / "world_1") == "2\n");
  CHECK(leftovers_after(token, 10s).empty());
}

TEST_CASE(
    "elastic: a node whose hung worker takes longer than the heartbeat timeout to stop stays in the job",
    "[e2e][elastic]") {
  // Rank 1 (node 1) goes silent: --hang-timeout declares it hung, and it then takes 8 s to stop on
  // SIGTERM, more than the heartbeat timeout (5 s). Rank 0 keeps printing. Node 1's agent heartbeats while
  // it stops its hung rank, so the restart has both nodes, as after any other failure.
  TempDir dir;
  const std::string token =
      "ddprun-elastic-hung-" + std::to_string(::getpid()) + "-" + std::to_string(free_port());
  const int port = free_port();
  const std::string script =
      "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then "
      "  if [ \"$RANK\" = 1 ]; then exec " +
      ddprun_test::fake_worker() +
      " exit-on 15 8000 0 hang; fi; "
      "  while :; do echo tick; sleep 0.3; done; "
      "fi; echo \"$WORLD_SIZE\" > \"$DIR/world_$RANK\"";
  std::vector<Proc> agents;
  for (int n = 0; n < 2; ++n) {
    agents.push_back(start({ddprun_test::ddprun_exe(),
                            "--nnodes",
                            "1:2",
                            "--node-rank",
                            std::to_string(n),
                            "--rdzv-endpoint",
                            "127.0.0.1:" + std::to_string(port),
                            "--max-restarts",
                            "2",
                            "--term-timeout",
                            "20",
                            "--hang-timeout",
                            "2",
                            "--rdzv-timeout",
                            "120",
                            "--nproc-per-node",
                            "1",
                            "--",
                            "/bin/sh",
                            "-c",
                            script},
                           {{"DIR", dir.path()}, {"DDPRUN_TEST_TOKEN", token}}, dir.path(),
                           "hung-agent" + std::to_string(n)));
  }
  for (auto& a : agents) {
    REQUIRE(wait_for(a, 180s));
    INFO(a.err());
    CHECK(a.code == 0);
    CHECK_THAT(a.err(), !Catch::Contains("lost the agent"));
  }
  CHECK_THAT(agents[1].err(), Catch::Contains("hung"));  // the first attempt did end on the hang
  CHECK(read_file(dir / "world_0") == "2\n");            // the restart ran with both nodes
  CHECK(read_file(dir / "world_1") == "2\n");
  CHECK(leftovers_after(token, 10s).empty());
}
