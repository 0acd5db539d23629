// The application layer: MASTER_PORT selection by binding, the self-launch command line.
#include <catch2/catch.hpp>

#include "launcher/self_launch.hpp"
#include "launcher/system.hpp"
#include "support/net_util.hpp"

using namespace ddprun::launcher;

TEST_CASE("ports: a busy planned MASTER_PORT is replaced, a free one kept, the store's avoided") {
  testnet::SilentListener busy;
  CHECK_FALSE(port_is_free(busy.port));
  const auto p = choose_master_port(busy.port, 0);
  CHECK(p != busy.port);
  CHECK(p != 0);
  const std::uint16_t free_port = testnet::unused_port();
  CHECK(port_is_free(free_port));
  CHECK(choose_master_port(free_port, 0) == free_port);
  CHECK(choose_master_port(free_port, free_port) != free_port);
  CHECK_FALSE(port_is_free(0));
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
