// --rank-order topology (docs/slurm.md, "Topology-aware node ranks"): the switch or block of a
// SLURM_TOPOLOGY_ADDR, the node-rank order, and the standby that replaces a lost node.
#include <catch2/catch.hpp>

#include "core/rank_order.hpp"

using namespace ddprun::core;

TEST_CASE("a topology address's switch or block is everything but its last component", "[rank_order]") {
  struct Row {
    std::string addr;
    std::optional<std::string> path;
    std::string why;
  };
  const std::vector<Row> rows = {
      {"s0.s3.node7", "s0.s3", ""},
      {"b3.node17", "b3", ""},
      {"s1.n2", "s1", ""},
      {"", std::nullopt, "no SLURM_TOPOLOGY_ADDR"},
      {"node7", std::nullopt, "SLURM_TOPOLOGY_ADDR names no switch or block (no topology plugin?)"},
      {"s0..node7", std::nullopt, "SLURM_TOPOLOGY_ADDR 's0..node7' has an empty component"},
      {".node7", std::nullopt, "SLURM_TOPOLOGY_ADDR '.node7' has an empty component"},
      {"s0.", std::nullopt, "SLURM_TOPOLOGY_ADDR 's0.' has an empty component"},
      {"s0 s1.n", std::nullopt, "SLURM_TOPOLOGY_ADDR holds spaces or control characters"},
      {std::string(300, 'a') + ".n", std::nullopt, "SLURM_TOPOLOGY_ADDR longer than 256 bytes"},
  };
  for (const auto& row : rows) {
    INFO(row.addr);
    const auto g = topology_group(row.addr);
    CHECK(g.path == row.path);
    CHECK(g.why == row.why);
  }
}

namespace {
// The order as input indices.
std::vector<std::size_t> order_of(const std::vector<OrderInput>& in) {
  std::vector<std::size_t> out;
  for (const auto& n : topology_order(in)) out.push_back(n.index);
  return out;
}
}  // namespace

TEST_CASE("node ranks follow the switches, the store's first, Slurm's order within each", "[rank_order]") {
  struct Row {
    const char* name;
    std::vector<OrderInput> in;
    std::vector<std::size_t> want;
  };
  const std::vector<Row> rows = {
      {"tree: Slurm interleaves two leaf switches",
       {{"s0.s1.n1", true}, {"s0.s2.n2", false}, {"s0.s1.n3", false}, {"s0.s2.n4", false}},
       {0, 2, 1, 3}},
      {"block addresses",
       {{"b3.n17", true}, {"b1.n2", false}, {"b3.n18", false}, {"b1.n3", false}, {"b2.n9", false}},
       {0, 2, 1, 3, 4}},
      {"the store node is not Slurm's first: its group still comes first",
       {{"b1.n1", false}, {"b2.n2", false}, {"b2.n3", true}, {"b1.n4", false}},
       {2, 1, 0, 3}},
      {"nodes without an address go last, in Slurm's order",
       {{"b1.n1", true}, {"", false}, {"n3", false}, {"b2.n4", false}, {"b1.n5", false}},
       {0, 4, 3, 1, 2}},
      {"the store node without an address stays first",
       {{"", true}, {"b2.n2", false}, {"b1.n3", false}},
       {0, 1, 2}},
      {"no address anywhere: Slurm's order", {{"", true}, {"", false}, {"", false}}, {0, 1, 2}},
      {"same leaf name under two spines are two groups",
       {{"s0.s1.n1", true}, {"s9.s1.n2", false}, {"s0.s1.n3", false}},
       {0, 2, 1}},
      {"one node", {{"b1.n1", true}}, {0}},
      {"none", {}, {}},
  };
  for (const auto& row : rows) {
    INFO(row.name);
    CHECK(order_of(row.in) == row.want);
  }
}

TEST_CASE("the order's description names each run of node ranks and its group", "[rank_order]") {
  const std::vector<OrderInput> in = {
      {"s0.s1.n1", true}, {"s0.s2.n2", false}, {"s0.s1.n3", false}, {"", false}};
  CHECK(describe_order(topology_order(in), {"n1", "n2", "n3", "n4"}) ==
        std::vector<std::string>{"node ranks 0-1: switch/block s0.s1 (n[1,3])",
                                 "node rank 2: switch/block s0.s2 (n2)",
                                 "node rank 3: no SLURM_TOPOLOGY_ADDR, kept in node-rank order (n4)"});
}

TEST_CASE("a run of node ranks is named as one rank or a range", "[rank_order]") {
  CHECK(node_rank_range(4, 4) == "node rank 4");
  CHECK(node_rank_range(4, 5) == "node ranks 4-5");
  CHECK(node_rank_range(0, 127) == "node ranks 0-127");
}

TEST_CASE("a lost node's place goes to a free standby of its switch or block first",
          "[rank_order][elastic]") {
  struct Row {
    const char* name;
    std::vector<StandbyCandidate> in;
    std::vector<std::string> lost;
    int max;
    std::vector<bool> want;
  };
  const std::vector<Row> rows = {
      {"the standby on the lost node's block, not Slurm's first standby",
       {{"b1", true}, {"b1", true}, {"b2", true}, {"b1", false}, {"b2", false}},
       {"b2"},
       4,
       {true, true, true, false, true}},
      {"none free there: Slurm's first standby",
       {{"b1", true}, {"b2", true}, {"b3", false}, {"b1", false}},
       {"b2"},
       3,
       {true, true, true, false}},
      {"lost node without a group: Slurm's first standby",
       {{"b1", true}, {"b2", false}, {"b1", false}},
       {""},
       2,
       {true, true, false}},
      {"two lost nodes, each its own block's standby",
       {{"b1", true}, {"b2", false}, {"b1", false}, {"b3", false}, {"b2", false}},
       {"b1", "b2"},
       3,
       {true, true, true, false, false}},
      {"two lost on one block with one standby there: the second takes Slurm's next",
       {{"b1", true}, {"b3", false}, {"b2", false}, {"b1", false}},
       {"b2", "b2"},
       3,
       {true, true, true, false}},
      {"a restart without a loss keeps the actives, even beyond Slurm's first",
       {{"b1", true}, {"b2", false}, {"b1", true}},
       {},
       2,
       {true, false, true}},
      {"fewer candidates than places: all run", {{"b1", true}, {"b2", false}}, {"b3"}, 4, {true, true}},
  };
  for (const auto& row : rows) {
    INFO(row.name);
    CHECK(choose_actives(row.in, row.lost, row.max) == row.want);
  }
}
