// The application layer: MASTER_PORT selection by binding, the self-launch command line.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "agent/io.hpp"
#include "launcher/self_launch.hpp"
#include "launcher/system.hpp"
#include "support/net_util.hpp"
#include "support/temp_dir.hpp"
#include "worker_store.hpp"

using namespace ddprun::launcher;

TEST_CASE("ports: a busy planned MASTER_PORT is replaced, a free one kept, the store's avoided") {
  testnet::SilentListener busy;
  CHECK_FALSE(port_is_free(busy.port));
  const auto p = choose_master_port(busy.port, 0).port;
  CHECK(p != busy.port);
  CHECK(p != 0);
  const std::uint16_t free_port = testnet::unused_port();
  CHECK(port_is_free(free_port));
  CHECK(choose_master_port(free_port, 0).port == free_port);
  CHECK(choose_master_port(free_port, free_port).port != free_port);
  CHECK(choose_master_port(free_port, 0, true).port == free_port);
}

TEST_CASE("ports: a replaced MASTER_PORT lies below the ephemeral range, where no connect() can take it") {
  // Another ddprun job holds the planned port: the one chosen instead must not be an ephemeral port, which
  // any outgoing connection on the machine may be given before worker rank 0 binds it.
  const std::uint16_t planned = testnet::unused_port();
  auto other = PortHold::take(planned);
  REQUIRE(other);
  const auto [low, high] = ephemeral_port_range();
  CHECK(low <= high);
  const auto chosen = choose_master_port(planned, 0);
  CHECK(chosen.port != planned);
  CHECK(chosen.port > planned);
  CHECK(chosen.port < low);
}

TEST_CASE("ports: master_port_fallbacks: above the planned port, below the ephemeral range, at most 256") {
  struct Row {
    int planned;
    std::uint16_t avoid;
    int low;
    std::vector<std::uint16_t> first;  // the first ones, in order
    std::size_t count;
  };
  const std::vector<Row> rows = {
      {29500, 0, 32768, {29501, 29502, 29503}, 256},
      {29500, 29502, 32768, {29501, 29503, 29504}, 255},  // avoid: the store's port
      {0, 0, 32768, {29501, 29502}, 256},                 // unset: above the default
      {40000, 0, 32768, {29501, 29502}, 256},             // ephemeral: above the default
      {32700, 0, 32768, {32701, 32702}, 67},              // up to the range, not into it
      {32767, 0, 32768, {}, 0},
      {29500, 0, 1024, {}, 0},  // a range that starts below the default: none
      {65535, 0, 70000, {}, 0},
  };
  for (const auto& r : rows) {
    CAPTURE(r.planned, r.avoid, r.low);
    const auto got = master_port_fallbacks(r.planned, r.avoid, r.low);
    CHECK(got.size() == r.count);
    REQUIRE(got.size() >= r.first.size());
    CHECK(std::equal(r.first.begin(), r.first.end(), got.begin()));
    for (const auto p : got) {
      CHECK(p < r.low);
      CHECK(p != r.avoid);
    }
  }
}

TEST_CASE("ports: the agent-served workers' store replaces a busy MASTER_PORT below the ephemeral range") {
  // --worker-store agent (the default): node 0's agent binds the replacement itself; it is the same
  // kind of port choose_master_port gives a rank0 job, not the kernel's ephemeral choice.
  const std::uint16_t planned = testnet::unused_port();
  auto other = PortHold::take(planned);  // another ddprun job on this machine holds the planned port
  REQUIRE(other);
  WorkerStoreHost host([](const std::string&) {}, /*legacy_21=*/false);
  const std::uint16_t port = host.serve("127.0.0.1", planned, 0, false, false, {});
  const auto [low, high] = ephemeral_port_range();
  CHECK(port != planned);
  CHECK(port < low);
  CHECK_FALSE(port_is_free(port));  // served: bound and listening
}

TEST_CASE("ports: a busy MASTER_PORT the user gave is an error naming it, never replaced") {
  testnet::SilentListener busy;
  CHECK_THROWS_WITH(choose_master_port(busy.port, 0, true),
                    Catch::Contains(fmt::format("--master-port {} is already in use", busy.port)) &&
                        Catch::Contains("drop --master-port"));
  CHECK_FALSE(port_is_free(0));
}

TEST_CASE("ports: a MASTER_PORT another ddprun job holds is free to bind but never chosen twice") {
  const std::uint16_t planned = testnet::unused_port();
  auto first = choose_master_port(planned, 0);
  CHECK(first.port == planned);
  CHECK(first.hold.port() == planned);
  CHECK(port_is_free(planned));  // nothing binds it yet: only the hold keeps the next job off
  CHECK_FALSE(PortHold::take(planned));
  auto second = choose_master_port(planned, 0);
  CHECK(second.port != planned);
  CHECK(second.port != 0);
  CHECK_THROWS_WITH(choose_master_port(planned, 0, true),
                    Catch::Contains(fmt::format("--master-port {} is already in use", planned)));
  // The job's next attempt keeps its own port; once the job ends, the port is free for the next one.
  auto again = choose_master_port(planned, 0, false, std::move(first.hold));
  CHECK(again.port == planned);
  again = {};
  CHECK(choose_master_port(planned, 0).port == planned);
}

TEST_CASE("self-launch: one agent task per node with the node's whole allocation", "[config][slurm]") {
  auto argv = self_launch_argv("srun", 3, {"/opt/ddprun", "--nproc-per-node", "4", "train.py"});
  const std::vector<std::string> want = {"srun",
                                         "--nodes=3",
                                         "--ntasks=3",
                                         "--ntasks-per-node=1",
                                         "--kill-on-bad-exit=1",
                                         "--whole",
                                         "/opt/ddprun",
                                         "--nproc-per-node",
                                         "4",
                                         "train.py"};
  CHECK(argv == want);
}

TEST_CASE("self-launch in a heterogeneous job: one step over every component", "[config][slurm]") {
  const auto argv = self_launch_argv("srun", 3, {"/opt/ddprun", "train.py"}, std::nullopt, false, 2);
  const std::vector<std::string> want = {
      "srun",        "--het-group=0-1", "--ntasks-per-node=1", "--kill-on-bad-exit=1", "--whole",
      "/opt/ddprun", "train.py"};
  CHECK(argv == want);
}

TEST_CASE("an interactive srun --pty step over several nodes gets a hint while it waits", "[config][slurm]") {
  ddprun::core::Resolved r;
  r.context = ddprun::core::SlurmContext::step;
  r.nagents = 2;
  const ddprun::core::EnvSnapshot pty = {{"SLURM_PTY_PORT", "37567"}};
  const auto hint = pty_step_hint(pty, r);
  REQUIRE(hint);
  CHECK_THAT(*hint, Catch::Contains("srun --pty step over 2 nodes") &&
                        Catch::Contains("srun --overlap --ntasks-per-node=1 ddprun"));
  CHECK_FALSE(pty_step_hint({}, r));  // not a pty step
  r.nagents = 1;
  CHECK_FALSE(pty_step_hint(pty, r));  // one node: nobody else to wait for
  r.nagents = 2;
  r.context = ddprun::core::SlurmContext::batch;
  CHECK_FALSE(pty_step_hint(pty, r));
}

TEST_CASE("self-launch in elastic mode: the step outlives a lost node or agent", "[config][slurm][elastic]") {
  // Fail-fast keeps --kill-on-bad-exit=1 (above); elastic mode must not let Slurm end the survivors.
  const auto argv = self_launch_argv("srun", 5, {"/opt/ddprun", "--nnodes", "4:4", "train.py"}, 2, true);
  const std::vector<std::string> want = {"srun",        "--nodes=5",
                                         "--ntasks=5",  "--ntasks-per-node=1",
                                         "--no-kill",   "--kill-on-bad-exit=0",
                                         "--whole",     "--gpus-per-node=2",
                                         "/opt/ddprun", "--nnodes",
                                         "4:4",         "train.py"};
  CHECK(argv == want);
  const auto fail_fast = self_launch_argv("srun", 5, {"/opt/ddprun", "train.py"}, std::nullopt, false);
  CHECK(std::find(fail_fast.begin(), fail_fast.end(), "--no-kill") == fail_fast.end());
  CHECK(std::find(fail_fast.begin(), fail_fast.end(), "--kill-on-bad-exit=1") != fail_fast.end());
}

TEST_CASE("elastic self-launch ends with the local agent's code, not srun's highest task code",
          "[config][slurm][elastic]") {
  CHECK(elastic_exit_code(137, 0) == 0);  // a lost node's agent was killed; the survivors finished
  CHECK(elastic_exit_code(137, 3) == 3);  // the job itself failed: its code
  CHECK(elastic_exit_code(137, std::nullopt) == 137);  // this host's agent left nothing: srun's
  CHECK(elastic_exit_code(0, std::nullopt) == 0);
}

TEST_CASE("the agent on the self-launching host records the job's code for it", "[config][slurm][elastic]") {
  ddprun::test::TempDir dir;
  const std::string path = (dir.path() / "exit_code").string();
  ::setenv(kSelfLaunchResultVar, path.c_str(), 1);
  ::setenv(kSelfLaunchHostVar, "not-this-host.invalid", 1);
  record_self_launch_result(3);
  CHECK_FALSE(std::filesystem::exists(path));  // another node's agent: the batch host's answers
  ::setenv(kSelfLaunchHostVar, ddprun::agent::local_hostname().c_str(), 1);
  record_self_launch_result(3);
  std::ifstream in(path);
  int code = -1;
  in >> code;
  CHECK(code == 3);
  ::unsetenv(kSelfLaunchResultVar);
  ::unsetenv(kSelfLaunchHostVar);
}

TEST_CASE("self-launch under --gpus-per-task holds every task's GPUs on each node", "[config][slurm][gpu]") {
  // sbatch -N2 --ntasks-per-node=2 --gpus-per-task=1: one agent per node must get 2 GPUs, not 1.
  const auto g = self_launch_gpus({{"SLURM_GPUS_PER_TASK", "1"}, {"SLURM_TASKS_PER_NODE", "2(x2)"}});
  REQUIRE(g.per_node.has_value());
  CHECK(*g.per_node == 2);
  CHECK(g.warning.empty());
  const auto argv = self_launch_argv("srun", 2, {"/opt/ddprun", "train.py"}, g.per_node);
  CHECK(std::find(argv.begin(), argv.end(), "--gpus-per-node=2") != argv.end());
  // Nothing asked per task: nothing added.
  CHECK_FALSE(self_launch_gpus({{"SLURM_TASKS_PER_NODE", "2(x2)"}}).per_node);
  // Uneven tasks per node cannot be one per-node count: said, not guessed.
  const auto uneven = self_launch_gpus({{"SLURM_GPUS_PER_TASK", "2"}, {"SLURM_TASKS_PER_NODE", "2,1"}});
  CHECK_FALSE(uneven.per_node);
  CHECK_THAT(uneven.warning, Catch::Contains("--gpus-per-node"));
}
