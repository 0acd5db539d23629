// The rank plan in every mode, GPU slicing, MP/DP groups, OMP threads and the exported environment.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "core/plan.hpp"
#include "support/plan_nodes.hpp"
#include "support/whole_plan.hpp"

using namespace ddprun::core;

using ddprun::test::build_plan;
using ddprun::test::nodes;
using ddprun::test::Plan;
using ddprun::test::plan_from_json;
using ddprun::test::plan_to_json;

TEST_CASE("agent mode: ranks ordered by node rank then local rank", "[plan]") {
  JobSpec job;
  job.mode = Mode::agent;
  job.nnodes = 3;
  job.node_rank = 1;
  job.master_addr = "node1";
  job.master_port = 20001;
  job.run_id = "42";
  // Nodes given out of order: the plan still orders by node rank.
  auto ns = nodes({2, 2, 2});
  std::swap(ns[0], ns[2]);
  Plan p = build_plan(job, ns);
  REQUIRE(p.world_size == 6);
  REQUIRE(p.workers.size() == 6);
  for (int r = 0; r < 6; ++r) {
    const auto& w = p.workers[static_cast<std::size_t>(r)];
    CHECK(w.rank == r);
    CHECK(w.node_rank == r / 2);
    CHECK(w.local_rank == r % 2);
    CHECK(w.env.at("RANK") == std::to_string(r));
    CHECK(w.env.at("LOCAL_RANK") == std::to_string(r % 2));
    CHECK(w.env.at("GROUP_RANK") == std::to_string(r / 2));
    CHECK(w.env.at("GROUP_WORLD_SIZE") == "3");
    CHECK(w.env.at("WORLD_SIZE") == "6");
    CHECK(w.env.at("LOCAL_WORLD_SIZE") == "2");
    CHECK(w.env.at("ROLE_NAME") == "default");
    CHECK(w.env.at("ROLE_RANK") == std::to_string(r));
    CHECK(w.env.at("ROLE_WORLD_SIZE") == "6");
    CHECK(w.env.at("MASTER_ADDR") == "node1");
    CHECK(w.env.at("MASTER_PORT") == "20001");
    CHECK(w.env.at("TORCHELASTIC_RUN_ID") == "42");
    CHECK(w.env.at("TORCHELASTIC_RESTART_COUNT") == "0");
    CHECK(w.env.at("TORCHELASTIC_MAX_RESTARTS") == "0");
    CHECK(w.env.at("TORCHELASTIC_USE_AGENT_STORE") == "True");  // the agent's store (issue 26)
    CHECK(w.env.at("DDPRUN_REQUEUE_COUNT") == "0");
  }
  CHECK(p.workers.front().host == "node1");  // rank 0 on the master node
  auto mine = p.workers_on(1);
  REQUIRE(mine.size() == 2);
  CHECK(mine[0].rank == 2);
  CHECK(mine[1].rank == 3);
}

TEST_CASE("heterogeneous nodes get consecutive ranks per node", "[plan]") {
  JobSpec job;
  job.mode = Mode::per_task;
  job.nnodes = 2;
  Plan p = build_plan(job, nodes({3, 1}));
  REQUIRE(p.world_size == 4);
  CHECK(p.workers[2].node_rank == 0);
  CHECK(p.workers[2].local_rank == 2);
  CHECK(p.workers[3].node_rank == 1);
  CHECK(p.workers[3].local_rank == 0);
  CHECK(p.workers[3].env.at("LOCAL_WORLD_SIZE") == "1");
  CHECK(p.workers[0].env.at("LOCAL_WORLD_SIZE") == "3");
}

TEST_CASE("per-task mode: this task keeps SLURM_PROCID as its rank", "[plan]") {
  JobSpec job;
  job.mode = Mode::per_task;
  job.nnodes = 2;
  job.node_rank = 1;
  job.task_rank = 4;
  job.task_local_rank = 1;
  Plan p = build_plan(job, nodes({3, 2}));
  auto mine = p.workers_on(1);
  REQUIRE(mine.size() == 2);
  CHECK(mine[1].rank == 4);
  CHECK(mine[1].env.at("RANK") == "4");
}

TEST_CASE("GPU slices: disjoint, ids kept as given", "[plan][gpu]") {
  JobSpec job;
  job.mode = Mode::agent;
  job.gpus_per_proc = 2;
  Plan p = build_plan(job, nodes({2}, {"4", "5", "6", "7"}));
  REQUIRE(p.workers.size() == 2);
  CHECK(p.workers[0].env.at("CUDA_VISIBLE_DEVICES") == "4,5");
  CHECK(p.workers[1].env.at("CUDA_VISIBLE_DEVICES") == "6,7");
}

TEST_CASE("without --gpus-per-proc every worker sees all GPUs (torchrun behaviour)", "[plan][gpu]") {
  JobSpec job;
  Plan p = build_plan(job, nodes({2}, {"0", "1"}));
  CHECK(p.workers[0].env.at("CUDA_VISIBLE_DEVICES") == "0,1");
  CHECK(p.workers[1].env.at("CUDA_VISIBLE_DEVICES") == "0,1");
  Plan cpu = build_plan(job, nodes({2}));
  CHECK(cpu.workers[0].env.count("CUDA_VISIBLE_DEVICES") == 0);
}

TEST_CASE("not enough GPUs for the slices is an error", "[plan][gpu][error]") {
  JobSpec job;
  job.gpus_per_proc = 2;
  CHECK_THROWS_WITH(build_plan(job, nodes({3}, {"0", "1", "2", "3"})),
                    Catch::Contains("4 visible GPUs") && Catch::Contains("--gpus-per-proc"));
}

TEST_CASE("resolve_nproc: N, gpu, cpu, auto and default", "[plan]") {
  const std::vector<std::string> four = {"0", "1", "2", "3"};
  CHECK(resolve_nproc(std::string("3"), {}, 0, 8) == 3);
  CHECK(resolve_nproc(std::string("gpu"), four, 0, 8) == 4);
  CHECK(resolve_nproc(std::string("gpu"), four, 2, 8) == 2);
  CHECK(resolve_nproc(std::string("cpu"), four, 0, 8) == 8);
  CHECK(resolve_nproc(std::string("auto"), four, 0, 8) == 4);
  CHECK(resolve_nproc(std::string("auto"), {}, 0, 8) == 8);
  CHECK(resolve_nproc(std::nullopt, four, 2, 8) == 2);
  CHECK(resolve_nproc(std::nullopt, {}, 0, 8) == 1);
  CHECK_THROWS_WITH(resolve_nproc(std::string("0"), {}, 0, 8), Catch::Contains("at least 1"));
  CHECK_THROWS_WITH(resolve_nproc(std::string("two"), {}, 0, 8), Catch::Contains("'two'"));
  CHECK_THROWS_WITH(resolve_nproc(std::string("gpu"), {}, 0, 8), Catch::Contains("no GPUs are visible"));
  CHECK_THROWS_WITH(resolve_nproc(std::string("gpu"), {"0", "1", "2"}, 2, 8),
                    Catch::Contains("not divisible by --gpus-per-proc 2"));
}

TEST_CASE("model-parallel groups: MP and DP ranks", "[plan][mp]") {
  JobSpec job;
  job.mode = Mode::agent;
  job.nnodes = 2;
  job.procs_per_replica = 2;
  Plan p = build_plan(job, nodes({4, 4}));
  REQUIRE(p.world_size == 8);
  for (const auto& w : p.workers) {
    CHECK(w.env.at("DDPRUN_MP_SIZE") == "2");
    CHECK(w.env.at("DDPRUN_DP_SIZE") == "4");
    CHECK(w.env.at("DDPRUN_MP_RANK") == std::to_string(w.rank % 2));
    CHECK(w.env.at("DDPRUN_DP_RANK") == std::to_string(w.rank / 2));
  }
  CHECK_THROWS_WITH(build_plan(job, nodes({3, 4})),
                    Catch::Contains("not divisible by --procs-per-replica 2"));
}

TEST_CASE("OMP_NUM_THREADS: user's value, else cpus-per-task share, else 1 with several workers",
          "[plan][omp]") {
  JobSpec job;
  auto omp = [&](int lws) {
    Plan p = build_plan(job, nodes({lws}));
    auto it = p.workers[0].env.find("OMP_NUM_THREADS");
    return it == p.workers[0].env.end() ? std::string("unset") : it->second;
  };
  CHECK(omp(1) == "unset");
  CHECK(omp(4) == "1");
  job.cpus_per_task = 16;
  CHECK(omp(4) == "4");
  CHECK(omp(32) == "1");      // at least 1
  job.mode = Mode::per_task;  // each ddprun spawns one worker: it gets the whole task's CPUs
  CHECK(omp(4) == "16");
  job.user_omp_num_threads = "7";
  CHECK(omp(4) == "7");
}

TEST_CASE("plan errors name the culprit", "[plan][error]") {
  JobSpec job;
  job.nnodes = 2;
  job.node_rank = 2;
  CHECK_THROWS_WITH(build_plan(job, nodes({1, 1})), Catch::Contains("node rank 2"));
  job.node_rank = 0;
  CHECK_THROWS_WITH(build_plan(job, nodes({1})), Catch::Contains("needs 2 nodes"));
  auto dup = nodes({1, 1});
  dup[1].node_rank = 0;
  CHECK_THROWS_WITH(build_plan(job, dup), Catch::Contains("duplicates"));
}

TEST_CASE("plan JSON round-trips", "[plan][json]") {
  JobSpec job;
  job.mode = Mode::agent;
  job.nnodes = 2;
  job.gpus_per_proc = 1;
  Plan p = build_plan(job, nodes({2, 2}, {"0", "1"}));
  p.workers[3].host.reset();
  Plan q = plan_from_json(nlohmann::json::parse(plan_to_json(p).dump()));
  REQUIRE(q.workers.size() == p.workers.size());
  CHECK(q.mode == Mode::agent);
  CHECK(q.world_size == 4);
  CHECK(q.master_port == p.master_port);
  for (std::size_t i = 0; i < p.workers.size(); ++i) {
    CHECK(q.workers[i].env == p.workers[i].env);
    CHECK(q.workers[i].host == p.workers[i].host);
    CHECK(q.workers[i].gpus == p.workers[i].gpus);
  }
  CHECK_THROWS_AS(plan_from_json(nlohmann::json::parse(R"({"mode":"agent"})")), Error);
}
