// Real PyTorch workers (python3-torch, gloo, env://) across two agents.
#include <catch2/catch.hpp>

#include "e2e/procs.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;

TEST_CASE("real PyTorch workers all_reduce across two agents", "[e2e][torch]") {
  TempDir dir;
  const int port = free_port();
  const std::string script = std::string(DDPRUN_SOURCE_DIR) + "/tests/e2e/allreduce.py";
  std::vector<Proc> agents;
  for (int n = 0; n < 2; ++n) {
    agents.push_back(start({DDPRUN_EXE, "--nnodes", "2", "--node-rank", std::to_string(n), "--rdzv-endpoint",
                            "127.0.0.1:" + std::to_string(port), "--nproc-per-node", "2", "--python",
                            "/usr/bin/python3", "--rdzv-timeout", "60", script, dir.path()},
                           {}, dir.path(), "agent" + std::to_string(n)));
  }
  for (auto& a : agents) {
    REQUIRE(wait_for(a, 240s));
    INFO(a.err());
    CHECK(a.code == 0);
  }
  for (int r = 0; r < 4; ++r) {
    std::istringstream in(read_file(dir / ("rank_" + std::to_string(r) + ".txt")));
    double got = 0, expected = 0;
    std::string host, master;
    int local = -1, group = -1;
    in >> got >> expected >> host >> master >> local >> group;
    CHECK(got == 10.0);
    CHECK(expected == 10.0);
    CHECK(local == r % 2);
    CHECK(group == r / 2);
  }
}
