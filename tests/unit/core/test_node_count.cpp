// Elastic mode and node counts (issue 14): MIN and MAX, the nodes that run workers, the standbys.
#include <catch2/catch.hpp>

#include "core/config.hpp"
#include "core/node_count.hpp"
#include "core/plan_table.hpp"
#include "support/config_inputs.hpp"

using namespace ddprun::core;

using ddprun::test::cmd;
using ddprun::test::sys;

namespace {

// An srun step of one task per node on node[1-N], seen from node `id`.
EnvSnapshot step_of(int n, int id) {
  const std::string nodes = "node[1-" + std::to_string(n) + "]";
  return {{"SLURM_JOB_ID", "55"},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_STEP_NODELIST", nodes},
          {"SLURM_JOB_NODELIST", nodes},
          {"SLURM_STEP_NUM_NODES", std::to_string(n)},
          {"SLURM_STEP_NUM_TASKS", std::to_string(n)},
          {"SLURM_STEP_TASKS_PER_NODE", "1(x" + std::to_string(n) + ")"},
          {"SLURM_NODEID", std::to_string(id)},
          {"SLURM_PROCID", std::to_string(id)},
          {"SLURM_LOCALID", "0"}};
}

// A batch script of an N-node allocation.
EnvSnapshot batch_of(int n) {
  const std::string nodes = "node[1-" + std::to_string(n) + "]";
  return {{"SLURM_JOB_ID", "56"},
          {"SLURM_JOB_NODELIST", nodes},
          {"SLURM_NODELIST", nodes},
          {"SLURM_JOB_NUM_NODES", std::to_string(n)},
          {"SLURM_NNODES", std::to_string(n)},
          {"SLURM_NODEID", "0"}};
}

}  // namespace

TEST_CASE("is_elastic: restarts, and a world that may shrink or has standbys", "[config][elastic]") {
  struct Row {
    int min, max, agents, restarts;
    bool elastic;
  };
  const Row rows[] = {
      {4, 4, 4, 0, false},  // the default: fixed size, no restarts
      {4, 4, 4, 3, false},  // restarts of failed workers only: nobody can stand in for a lost node
      {3, 4, 4, 0, false},  // may shrink, but no restart allowed
      {3, 4, 4, 2, true},   // shrinks to 3
      {4, 4, 5, 3, true},   // one standby
      {4, 4, 5, 0, false},  // a standby without restarts is no use
      {1, 1, 1, 5, false},  // one node
      {2, 4, 3, 1, true},   // fewer agents than MAX, still may shrink
  };
  for (const auto& r : rows) {
    INFO(r.min << ":" << r.max << " agents " << r.agents << " restarts " << r.restarts);
    CHECK(is_elastic(r.min, r.max, r.agents, r.restarts) == r.elastic);
  }
}

TEST_CASE("node counts: a Slurm step keeps MIN:MAX in elastic mode, the extra nodes are standbys",
          "[config][elastic][slurm]") {
  struct Row {
    std::optional<std::string> nnodes;
    int n, restarts;
    NodeCounts want;
  };
  const Row rows[] = {
      {std::nullopt, 4, 2, {4, 4, 4, 4, false}},  // no --nnodes: nothing changes
      {"3:4", 4, 2, {3, 4, 4, 4, true}},
      {"4:4", 5, 3, {4, 4, 4, 5, true}},  // one standby
      {"2:3", 5, 1, {2, 3, 3, 5, true}},  // may shrink, and two standbys
      {"2:4", 3, 1, {2, 4, 3, 3, true}},
      {"2:4", 3, 0, {3, 3, 3, 3, false}},  // fail-fast: the step's nodes, no waiting for a 4th
      {"4", 4, 0, {4, 4, 4, 4, false}},
  };
  for (const auto& r : rows) {
    INFO(r.nnodes.value_or("-") << " on " << r.n << " nodes, restarts " << r.restarts);
    CHECK(step_counts(r.nnodes, r.n, r.restarts, "the step") == r.want);
  }
  CHECK_THROWS_WITH(step_counts("4:4", 5, 0, "the step"),
                    Catch::Contains("--nnodes 4:4 disagrees with the step (5 nodes)") &&
                        Catch::Contains("add --max-restarts K to keep the extra node as a standby"));
  CHECK_THROWS_WITH(step_counts("3", 5, 0, "the step"),
                    Catch::Contains("keep the 2 extra nodes as standbys"));
  CHECK_THROWS_WITH(step_counts("3:4", 2, 2, "the step"),
                    Catch::Contains("disagrees") && !Catch::Contains("--max-restarts"));
}

TEST_CASE("node counts: an allocation keeps its extra nodes only in elastic mode",
          "[config][elastic][slurm]") {
  CHECK(batch_counts(std::nullopt, 5, 3, "x") == NodeCounts{5, 5, 5, 5, false});
  CHECK(batch_counts("4:4", 5, 0, "x") == NodeCounts{4, 4, 4, 4, false});  // today: MAX of them
  CHECK(batch_counts("4:4", 5, 3, "x") == NodeCounts{4, 4, 4, 5, true});
  CHECK(batch_counts("2:8", 5, 3, "x") == NodeCounts{2, 8, 5, 5, true});
  CHECK_THROWS_WITH(batch_counts("6:8", 5, 3, "SLURM_JOB_NODELIST='n[1-5]'"),
                    Catch::Contains("more nodes than the allocation's 5 (SLURM_JOB_NODELIST='n[1-5]')"));
}

TEST_CASE("node counts outside Slurm: a --node-rank at or above MAX is a standby in elastic mode",
          "[config][elastic]") {
  CHECK(outside_counts(std::nullopt, std::nullopt, 0) == NodeCounts{1, 1, 1, 1, false});
  CHECK(outside_counts("2:4", 0, 0) == NodeCounts{2, 4, 4, 4, false});
  CHECK(outside_counts("4", 5, 2) == NodeCounts{4, 4, 4, 6, true});
  CHECK(outside_counts("4", 5, 0) == NodeCounts{4, 4, 4, 4, false});  // resolve refuses it
}

TEST_CASE("resolve: a step with more nodes than MAX runs the extras as standbys",
          "[config][elastic][slurm]") {
  auto o = cmd();
  o.nnodes = "4:4";
  o.max_restarts = 3;
  const auto r = resolve(o, step_of(5, 4), sys());
  CHECK(r.elastic);
  CHECK(r.nagents == 5);
  CHECK(r.job.nnodes == 4);
  CHECK(r.nnodes_min == 4);
  CHECK(r.nnodes_max == 4);
  CHECK(r.job.node_rank == 4);
  REQUIRE(r.nodes.size() == 5);
  CHECK(r.nodes[4].host == "node5");
  CHECK(r.nodes[4].standby);
  CHECK_FALSE(r.nodes[3].standby);
  CHECK(r.self.standby);
  const PlanTable t = make_plan_table(r.job, r.nodes);  // what the dry run shows
  CHECK(t.job.world_size == 4);
  CHECK(t.nodes.size() == 5);
  CHECK(derive_workers(t, 4).empty());
  // Fail-fast: the same step is an error that says how to keep the standby.
  o.max_restarts.reset();
  CHECK_THROWS_WITH(resolve(o, step_of(5, 0), sys()), Catch::Contains("--max-restarts"));
}

TEST_CASE("resolve: elastic MIN:MAX in a step, fail-fast and no --nnodes as before",
          "[config][elastic][slurm]") {
  auto o = cmd();
  o.nnodes = "3:4";
  o.max_restarts = 2;
  auto r = resolve(o, step_of(4, 1), sys());
  CHECK(r.elastic);
  CHECK(r.nnodes_min == 3);
  CHECK(r.nnodes_max == 4);
  CHECK(r.nagents == 4);
  o.max_restarts.reset();
  r = resolve(o, step_of(4, 1), sys());
  CHECK_FALSE(r.elastic);
  CHECK(r.nnodes_min == 4);
  CHECK(r.nnodes_max == 4);
  r = resolve(cmd(), step_of(4, 1), sys());
  CHECK_FALSE(r.elastic);
  CHECK(r.nagents == 4);
  CHECK(r.job.nnodes == 4);
}

TEST_CASE("resolve: a batch script keeps the allocation's extra nodes only in elastic mode",
          "[config][elastic][slurm]") {
  auto o = cmd();
  o.nnodes = "4:4";
  auto r = resolve(o, batch_of(5), sys());
  CHECK_FALSE(r.elastic);
  CHECK(r.allocation_hosts.size() == 4);
  o.max_restarts = 3;
  r = resolve(o, batch_of(5), sys());
  CHECK(r.elastic);
  CHECK(r.allocation_hosts.size() == 5);
  CHECK(r.job.nnodes == 4);
  CHECK(r.nodes.back().standby);
}

TEST_CASE("resolve outside Slurm: --node-rank beyond MAX only as an elastic standby", "[config][elastic]") {
  auto o = cmd();
  o.nnodes = "4";
  o.node_rank = 4;
  o.rdzv_endpoint = "head:29400";
  CHECK_THROWS_WITH(resolve(o, {}, sys()),
                    Catch::Contains("--node-rank 4 is not below the number of nodes 4") &&
                        Catch::Contains("--max-restarts"));
  o.max_restarts = 1;
  const auto r = resolve(o, {}, sys());
  CHECK(r.elastic);
  CHECK(r.mode == Mode::agent);
  CHECK(r.nagents == 5);
  CHECK(r.job.nnodes == 4);
  CHECK(r.self.standby);
  CHECK(r.self.host == "ws");
  CHECK(make_plan_table(r.job, r.nodes).job.world_size == 4 * r.nodes[0].local_world_size);
  o.standalone = true;
  CHECK_THROWS_WITH(resolve(o, {}, sys()),
                    Catch::Contains("--standalone runs on one node but --nnodes is 4"));
  o.nnodes.reset();
  o.node_rank = 1;
  CHECK_THROWS_WITH(resolve(o, {}, sys()), Catch::Contains("--node-rank 1 makes this a standby"));
}
