// Scale on loopback (issue 16): 64 real agents × 32 workers on one small machine. The master's
// node spawns its workers while every other agent's heartbeats arrive: a busy master is not a lost
// master, and nobody declares anybody lost.
#include <catch2/catch.hpp>

#include "e2e/job.hpp"

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
