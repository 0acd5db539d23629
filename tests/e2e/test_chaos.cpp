// Chaos on loopback: agents stopped, ports taken, a master that never comes. Every case must end with
// every agent exited non-zero within a stated bound, a clear message, and no process left behind.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <sys/socket.h>

#include <map>

#include "e2e/procs.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

const std::string kFake = FAKE_WORKER;

std::vector<std::string> agent_argv(int nnodes, int node, int port, std::vector<std::string> cmd,
                                    std::vector<std::string> extra = {}, int term_timeout = 2) {
  std::vector<std::string> argv = {DDPRUN_EXE,
                                   "--nnodes",
                                   std::to_string(nnodes),
                                   "--node-rank",
                                   std::to_string(node),
                                   "--rdzv-endpoint",
                                   "127.0.0.1:" + std::to_string(port),
                                   "--term-timeout",
                                   std::to_string(term_timeout)};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back("--");
  argv.insert(argv.end(), cmd.begin(), cmd.end());
  return argv;
}

// A socket listening on loopback:port that never answers (held until destroyed).
struct Squatter {
  int fd = -1;
  int port = 0;
  // `want`: that port (when something else holds it already, it is busy all the same); 0: any free one.
  explicit Squatter(int want = 0) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<std::uint16_t>(want));
    const int one = 1;  // a TIME_WAIT left by an earlier run must not keep the squatter out
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      port = want;
      return;
    }
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

TEST_CASE("chaos: with an agent SIGSTOPped, the master and the other agents exit within the documented bound",
          "[e2e][chaos]") {
  TempDir dir;
  const std::string token = "ddprun-chaos-stop3-" + std::to_string(::getpid());
  const int port = free_port();
  std::vector<Proc> agents;
  for (int n = 0; n < 3; ++n) {
    agents.push_back(
        start(agent_argv(3, n, port, {"/bin/sh", "-c", "touch \"$DIR/ready_$RANK\"; exec " + kFake + " hang"},
                         {}, 1),
              {{"DIR", dir.path()}, {"TOKEN", token}}, dir.path(), "agent" + std::to_string(n)));
  }
  for (int r = 0; r < 3; ++r) REQUIRE(wait_file(dir / ("ready_" + std::to_string(r))));
  const auto stopped_at = std::chrono::steady_clock::now();
  ::kill(agents[1].pid, SIGSTOP);
  // docs/agent.md, failure bounds: the heartbeat timeout (5 s) plus the grace (--term-timeout 1).
  // The margin only absorbs a loaded machine; precise figures belong in bench/.
  const auto bound = 5s + 1s + 3s;
  std::map<int, double> took;
  while (took.size() < 2 && std::chrono::steady_clock::now() - stopped_at < 60s) {
    for (int n : {0, 2}) {
      if (took.count(n) == 0 && exited(agents[static_cast<std::size_t>(n)])) {
        took[n] = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped_at).count();
      }
    }
    std::this_thread::sleep_for(5ms);
  }
  ::kill(agents[1].pid, SIGCONT);
  for (int n : {0, 2}) {
    auto& a = agents[static_cast<std::size_t>(n)];
    REQUIRE(wait_for(a, 60s));
    INFO("agent " << n << " exited " << a.code << " after " << (took.count(n) ? took[n] : -1.0)
                  << " s: " << a.err());
    REQUIRE(took.count(n) == 1);
    CHECK(a.code != 0);
    CHECK(took[n] < std::chrono::duration<double>(bound).count());
    CHECK_THAT(a.err(),
               Catch::Contains("lost the agent on") && Catch::Contains("(node rank 1): no heartbeat"));
  }
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

TEST_CASE("chaos: a busy default MASTER_PORT is replaced by a free one that every worker gets",
          "[e2e][chaos]") {
  TempDir dir;
  Squatter sq(29500);  // the default MASTER_PORT outside Slurm; a --master-port that is busy is an error
  const int port = free_port();
  std::vector<Proc> agents;
  for (int n = 0; n < 2; ++n) {
    agents.push_back(
        start(agent_argv(2, n, port, {"/bin/sh", "-c", "echo $MASTER_PORT > \"$DIR/port_$RANK\""}, {}),
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
