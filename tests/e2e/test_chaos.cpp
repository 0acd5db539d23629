// Chaos on loopback: agents stopped, ports taken, a master that never comes. Every case must end with
// every agent exited non-zero within a stated bound, a clear message, and no process left behind.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <sys/socket.h>

#include "e2e/procs.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

const std::string kFake = FAKE_WORKER;

std::vector<std::string> agent_argv(int nnodes, int node, int port, std::vector<std::string> cmd,
                                    std::vector<std::string> extra = {}) {
  std::vector<std::string> argv = {DDPRUN_EXE,
                                   "--nnodes",
                                   std::to_string(nnodes),
                                   "--node-rank",
                                   std::to_string(node),
                                   "--rdzv-endpoint",
                                   "127.0.0.1:" + std::to_string(port),
                                   "--term-timeout",
                                   "2"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back("--");
  argv.insert(argv.end(), cmd.begin(), cmd.end());
  return argv;
}

// A socket listening on loopback:port that never answers (held until destroyed).
struct Squatter {
  int fd = -1;
  int port = 0;
  Squatter() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd, 16);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~Squatter() { ::close(fd); }
};

}  // namespace

TEST_CASE("chaos: a SIGSTOPped agent misses heartbeats and everyone exits non-zero", "[e2e][chaos]") {
  TempDir dir;
  const std::string token = "ddprun-chaos-stop-" + std::to_string(::getpid());
  const int port = free_port();
  std::vector<Proc> agents;
  for (int n = 0; n < 2; ++n) {
    agents.push_back(start(
        agent_argv(2, n, port, {"/bin/sh", "-c", "touch \"$DIR/ready_$RANK\"; exec " + kFake + " hang"}),
        {{"DIR", dir.path()}, {"TOKEN", token}}, dir.path(), "agent" + std::to_string(n)));
  }
  REQUIRE(wait_file(dir / "ready_0"));
  REQUIRE(wait_file(dir / "ready_1"));
  ::kill(agents[1].pid, SIGSTOP);
  // Bound: heartbeat timeout (5 s) plus teardown grace (2 s), with room for a loaded machine.
  REQUIRE(wait_for(agents[0], 60s));
  CHECK(agents[0].code != 0);
  CHECK_THAT(agents[0].err(), Catch::Contains("node rank 1") || Catch::Contains("heartbeat"));
  ::kill(agents[1].pid, SIGCONT);
  REQUIRE(wait_for(agents[1], 60s));
  CHECK(agents[1].code != 0);
  CHECK(leftovers_after(token, 10s).empty());
}

TEST_CASE("chaos: the store port is already in use", "[e2e][chaos]") {
  TempDir dir;
  Squatter sq;
  std::vector<Proc> agents;
  for (int n = 0; n < 2; ++n) {
    agents.push_back(start(agent_argv(2, n, sq.port, {"/bin/true"}, {"--rdzv-timeout", "5"}), {}, dir.path(),
                           "agent" + std::to_string(n)));
  }
  for (auto& a : agents) REQUIRE(wait_for(a, 60s));
  CHECK(agents[0].code != 0);
  CHECK(agents[1].code != 0);
  CHECK_THAT(agents[0].err(), Catch::Contains(std::to_string(sq.port)));
  CHECK_THAT(agents[1].err(), Catch::Contains("127.0.0.1:" + std::to_string(sq.port)));
}

TEST_CASE("chaos: the master never starts", "[e2e][chaos]") {
  TempDir dir;
  const int port = free_port();
  Proc a = start(agent_argv(2, 1, port, {"/bin/true"}, {"--rdzv-timeout", "3"}), {}, dir.path(), "agent1");
  REQUIRE(wait_for(a, 60s));
  CHECK(a.code != 0);
  CHECK_THAT(a.err(),
             Catch::StartsWith("ddprun: error: ") && Catch::Contains("127.0.0.1:" + std::to_string(port)));
}

TEST_CASE("chaos: a busy MASTER_PORT is replaced by a free one that every worker gets", "[e2e][chaos]") {
  TempDir dir;
  Squatter sq;
  const int port = free_port();
  std::vector<Proc> agents;
  for (int n = 0; n < 2; ++n) {
    agents.push_back(
        start(agent_argv(2, n, port, {"/bin/sh", "-c", "echo $MASTER_PORT > \"$DIR/port_$RANK\""},
                         {"--master-port", std::to_string(sq.port)}),
              {{"DIR", dir.path()}}, dir.path(), "agent" + std::to_string(n)));
  }
  for (auto& a : agents) {
    REQUIRE(wait_for(a, 60s));
    CHECK(a.code == 0);
  }
  const std::string p0 = read_file(dir / "port_0");
  CHECK(p0 == read_file(dir / "port_1"));
  CHECK(p0 != std::to_string(sq.port) + "\n");
  CHECK(std::stoi(p0) > 0);
}

TEST_CASE("chaos: a SIGKILLed agent leaves nothing of its workers' process groups", "[e2e][chaos]") {
  TempDir dir;
  const std::string token = "ddprun-chaos-reaper-" + std::to_string(::getpid());
  const int port = free_port();
  // Each worker starts a child the way a DataLoader does; the agent's death signal reaches only the worker.
  Proc agent = start(
      agent_argv(1, 0, port,
                 {"/bin/sh", "-c",
                  "sleep 300 & echo $! > \"$DIR/child_$LOCAL_RANK\"; touch \"$DIR/ready_$LOCAL_RANK\"; wait"},
                 {"--nproc-per-node", "2"}),
      {{"DIR", dir.path()}, {"TOKEN", token}}, dir.path(), "agent");
  REQUIRE(wait_file(dir / "ready_0"));
  REQUIRE(wait_file(dir / "ready_1"));
  ::kill(agent.pid, SIGKILL);
  REQUIRE(wait_for(agent, 10s));
  CHECK(leftovers_after(token, 5s).empty());
}
