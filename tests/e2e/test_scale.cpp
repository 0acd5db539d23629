// Scale on loopback (issue 16): 64 real agents × 32 workers on one small machine. The master's
// node spawns its workers while every other agent's heartbeats arrive: a busy master is not a lost
// master, and nobody declares anybody lost.
#include <catch2/catch.hpp>

#include <sys/resource.h>

#include "e2e/job.hpp"
#include "support/byte_proxy.hpp"

using namespace ddprun::test;

TEST_CASE("scale: 64 agents × 32 workers of /bin/true all finish with exit 0", "[e2e][scale]") {
  Job job;
  job.start(64, 32, {"/bin/true"});
  job.wait_all(280s);  // only against hangs: 2048 processes on 2 cores take a while
  for (std::size_t n = 0; n < job.agents.size(); ++n) {
    INFO("agent " << n << ": " << job.agents[n].err());
    CHECK(job.agents[n].code == 0);
  }
}

// What a real agent receives from the store is bounded by the plan's budget, 64 B a node + 4 KB
// (docs/scale.md): the plan, the answers, heartbeat pongs, the barrier. Counted exactly by a relay
// between node 1 and the master, since /proc/PID/io counts no socket reads. Bytes, not timing.
TEST_CASE("scale: a real agent of a 64-node job receives at most 64 B a node + 4 KB from the store",
          "[e2e][scale]") {
  constexpr int kNodes = 64;
  Job job;
  testnet::ByteProxy relay(static_cast<std::uint16_t>(job.port));
  job.port_of[1] = relay.port();
  job.start(kNodes, 2, {"/bin/true"});
  job.wait_all(280s);
  for (std::size_t n = 0; n < job.agents.size(); ++n) {
    INFO("agent " << n << ": " << job.agents[n].err());
    REQUIRE(job.agents[n].code == 0);
  }
  INFO("node 1 received " << relay.to_client() << " B and sent " << relay.to_server() << " B over "
                          << relay.connections() << " connection(s)");
  CHECK(relay.connections() >= 1);
  CHECK(relay.to_client() > 0);
  CHECK(relay.to_client() <= 64u * kNodes + 4096u);
}

// The master's store raises its own soft open-file limit to the hard limit for its sockets; the
// workers still get the limit the user started ddprun with.
TEST_CASE("scale: workers keep the open-file limit ddprun started with", "[e2e][scale]") {
  rlimit before{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &before) == 0);
  REQUIRE((before.rlim_max == RLIM_INFINITY || before.rlim_max > 1000));
  rlimit lowered = before;
  lowered.rlim_cur = 1000;
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &lowered) == 0);  // the agents inherit it
  Job job;
  job.start(2, 1, {"/bin/sh", "-c", "echo nofile=$(ulimit -Sn)"});
  ::setrlimit(RLIMIT_NOFILE, &before);
  job.wait_all(60s);
  for (std::size_t n = 0; n < job.agents.size(); ++n) {
    INFO("agent " << n << ": " << job.agents[n].err());
    CHECK(job.agents[n].code == 0);
    CHECK_THAT(job.agents[n].out(), Catch::Contains("nofile=1000"));
  }
}
