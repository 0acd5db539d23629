// Real PyTorch workers (gloo, env://) across two agents, with torch 1.13 and 2.x
// (tests/support/torch_python.hpp).
#include <catch2/catch.hpp>

#include <csignal>

#include "e2e/job.hpp"
#include "support/paths.hpp"
#include "support/torch_python.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;

TEST_CASE("real PyTorch workers all_reduce across two agents", "[e2e][torch][torch2]") {
  const std::string python = torch_python();
  TempDir dir;
  const int port = free_port();
  // The default MASTER_PORT: the master claims it, so no job beside this one takes it before rank 0 binds.
  const std::string script = ddprun_test::source_dir() + "/tests/e2e/allreduce.py";
  std::vector<Proc> agents;
  for (int n = 0; n < 2; ++n) {
    agents.push_back(start({ddprun_test::ddprun_exe(), "--nnodes", "2", "--node-rank", std::to_string(n),
                            "--rdzv-endpoint", "127.0.0.1:" + std::to_string(port), "--nproc-per-node", "2",
                            "--python", python, "--rdzv-timeout", "60", script, dir.path()},
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
    std::string host, master, interpreter;
    int local = -1, group = -1;
    in >> got >> expected >> host >> master >> local >> group >> interpreter;
    CHECK(got == 10.0);
    CHECK(expected == 10.0);
    CHECK(local == r % 2);
    CHECK(group == r / 2);
    CHECK(interpreter == python);  // the torch under test, not whichever python3 comes first on PATH
  }
}

TEST_CASE("SIGTERM: real PyTorch ranks stop at the same step, rank 0's torch.save checkpoint loads, exit 143",
          "[e2e][torch][signals][torch2]") {
  const std::string python = torch_python();
  Job job;
  // A generous grace: the checkpoint, not the time it takes, is what is tested.
  job.start(2, 1, {ddprun_test::source_dir() + "/tests/e2e/checkpoint_worker.py"},
            {"--python", python, "--term-timeout", "60", "--rdzv-timeout", "120"});
  REQUIRE(wait_file(job.dir / "ready_0", 180s));
  REQUIRE(wait_file(job.dir / "ready_1", 180s));
  for (auto& a : job.agents) ::kill(a.pid, SIGTERM);  // what Slurm does to every task of the step
  job.wait_all(240s);
  for (auto& a : job.agents) {
    INFO(a.err());
    CHECK(a.code == 143);
  }
  // Every rank added rank+1 at every step: the weights are 3 x the steps the checkpoint says it took.
  auto check =
      start({python, "-c",
             "import sys, torch; c = torch.load(sys.argv[1]); "
             "assert c['step'] > 0 and torch.equal(c['weights'], torch.full((4,), 3.0 * c['step'])), c",
             job.dir / "ckpt.pt"},
            {}, job.dir.str(), "load");
  REQUIRE(wait_for(check, 120s));
  INFO(check.err());
  CHECK(check.code == 0);
  CHECK(leftovers_after(job.token, 10s).empty());
}
