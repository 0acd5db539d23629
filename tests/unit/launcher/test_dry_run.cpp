// The dry-run and startup-table rendering of the application layer.
#include <catch2/catch.hpp>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/config.hpp"
#include "core/cpu_bind.hpp"
#include "core/plan.hpp"
#include "launcher/dry_run.hpp"
#include "support/plan_nodes.hpp"

using namespace ddprun::core;
using ddprun::launcher::gpus_seen;
using ddprun::launcher::render_startup_table;

using ddprun::test::nodes;

TEST_CASE("startup table: one row per node with ranks, GPUs and the master", "[plan][table]") {
  JobSpec job;
  job.mode = Mode::agent;
  job.nnodes = 2;
  job.gpus_per_proc = 1;
  job.master_addr = "node1";
  job.master_port = 20001;
  job.run_id = "99";
  Plan p = build_plan(job, nodes({2, 2}, {"0", "1"}));
  std::string t = render_startup_table(p, 0);
  CHECK_THAT(t, Catch::Contains("run 99 attempt 0: 2 nodes, world size 4, master node1:20001"));
  CHECK_THAT(t, Catch::Contains("node2") && Catch::Contains("2-3") && Catch::Contains("2:0 3:1"));
  CHECK_THAT(t, Catch::Contains("gpus each rank sees (ranks:CUDA_VISIBLE_DEVICES)"));
  JobSpec big;
  big.mode = Mode::agent;
  big.nnodes = 40;
  std::vector<int> ones(40, 1);
  Plan bp = build_plan(big, nodes(ones));
  std::string bt = render_startup_table(bp, 1, 16);
  CHECK_THAT(
      bt, Catch::Contains("... 24 more nodes ...") && Catch::Contains("node40") && Catch::Contains("node1 "));
  CHECK(std::count(bt.begin(), bt.end(), '\n') == 2 + 16 + 1);
}

TEST_CASE("startup line and dry-run header name a run id only when there is one", "[plan][table]") {
  JobSpec job;  // standalone: no Slurm job id and no --rdzv-id
  Plan p = build_plan(job, nodes({2}));
  const std::string t = render_startup_table(p, 0);
  CHECK_THAT(t, Catch::StartsWith("ddprun: attempt 0: 1 node, world size 2, master 127.0.0.1:29500\n"));
  CHECK_THAT(t, !Catch::Contains("none"));
  ddprun::core::Resolved r;
  r.job = job;
  std::string text = ddprun::launcher::render_plan_text(r, p);
  CHECK_THAT(
      text,
      Catch::StartsWith(
          "ddprun plan: standalone mode, 1 node, world size 2, master 127.0.0.1:29500\n"
          "master port 29500 is checked when the job starts: if it is busy then, a free one is used\n"));
  r.master_port_given = true;
  CHECK_THAT(ddprun::launcher::render_plan_text(r, p),
             Catch::Contains(
                 "master port 29500 is checked when the job starts: if it is busy then, the run stops\n"));
  r.master_port_given = false;
  job.run_id = "4242";
  p = build_plan(job, nodes({2}));
  CHECK_THAT(render_startup_table(p, 1), Catch::StartsWith("ddprun: run 4242 attempt 1: 1 node"));
  r.job = job;
  CHECK_THAT(ddprun::launcher::render_plan_text(r, p), Catch::Contains(", run id 4242\n"));
}

TEST_CASE("startup table: the GPU column says what each rank sees", "[plan][table]") {
  struct Row {
    int gpus_per_proc;
    int nproc;
    std::vector<std::string> gpus;
    std::string node0, node1;
  };
  const std::vector<Row> table = {
      {0, 4, {"0", "1", "2", "3"}, "0-3:0,1,2,3", "4-7:0,1,2,3"},  // all see the node's GPUs
      {1, 4, {"0", "1", "2", "3"}, "0:0 1:1 2:2 3:3", "4:0 5:1 6:2 7:3"},
      {2, 2, {"4", "5", "6", "7"}, "0:4,5 1:6,7", "2:4,5 3:6,7"},  // Slurm's ids, as given
      {0, 2, {}, "-", "-"},                                        // no GPUs
      {0, 1, {"0"}, "0:0", "1:0"},
  };
  for (const auto& r : table) {
    JobSpec job;
    job.mode = Mode::agent;
    job.nnodes = 2;
    job.gpus_per_proc = r.gpus_per_proc;
    const Plan p = build_plan(job, nodes({r.nproc, r.nproc}, r.gpus));
    INFO(r.node0);
    CHECK(gpus_seen(p.workers_on(0)) == r.node0);
    CHECK(gpus_seen(p.workers_on(1)) == r.node1);
    CHECK_THAT(render_startup_table(p, 0), Catch::Contains(" " + r.node1 + "\n"));
  }
}

namespace {

// 2 NUMA nodes of 4 single-thread cores; GPU 0 on node 1, GPU 1 on node 0.
Topology two_numa() {
  Topology t;
  for (int c = 0; c < 8; ++c) t.cores.push_back({{c}, c / 4});
  t.gpu_numa = {{"0", {1}}, {"1", {0}}};
  return t;
}

}  // namespace

TEST_CASE("dry-run --cpu-bind shows this node's CPUs and '?' for other nodes", "[plan][dryrun][cpubind]") {
  Resolved r;
  r.mode = Mode::agent;
  r.context = SlurmContext::step;
  r.job.mode = Mode::agent;
  r.job.nnodes = 2;
  r.job.node_rank = 1;
  r.job.gpus_per_proc = 1;
  r.cpu_bind = CpuBind::gpu;
  Plan p = build_plan(r.job, nodes({2, 2}, {"0", "1"}));
  p.node_rank = 1;
  const auto warning = ddprun::launcher::bind_this_node(r, p, two_numa(), {0, 1, 2, 3, 4, 5, 6, 7});
  CHECK_FALSE(warning);
  CHECK(p.workers[0].cpus.empty());  // node 0 decides on its own machine
  CHECK(format_cpu_list(p.workers[2].cpus) == "4-7");
  CHECK(format_cpu_list(p.workers[3].cpus) == "0-3");
  CHECK(p.workers[3].env.at("OMP_NUM_THREADS") == "4");
  const std::string text = ddprun::launcher::render_plan_text(r, p);
  CHECK_THAT(text, Catch::Contains("cpu binding: gpu; cpus are this node's"));
  CHECK_THAT(text, Catch::Contains("  cpus\n"));
  CHECK_THAT(text, Catch::Contains("  ?  "));
  CHECK_THAT(text, Catch::Contains("  4-7" + std::string(11, ' ') + "<- this node"));
  const auto j = nlohmann::json::parse(ddprun::launcher::render_plan_json(r, p));
  CHECK(j.at("cpu_bind") == "gpu");
  CHECK(j.at("workers").at(0).at("cpus").is_null());
  CHECK(j.at("workers").at(3).at("cpus") == nlohmann::json({0, 1, 2, 3}));
}

TEST_CASE("dry-run --cpu-bind: errors before anything starts, a batch script binds nothing",
          "[plan][dryrun][cpubind]") {
  Resolved r;
  r.job.nnodes = 1;
  r.cpu_bind = CpuBind::cores;
  Plan p = build_plan(r.job, nodes({3}));
  CHECK_THROWS_WITH(ddprun::launcher::bind_this_node(r, p, two_numa(), {0, 1}),
                    Catch::StartsWith("--cpu-bind cores: 3 workers but only 2 cores available"));
  r.context = SlurmContext::batch;
  CHECK_FALSE(ddprun::launcher::bind_this_node(r, p, two_numa(), {0, 1}));
  CHECK(p.workers[0].cpus.empty());
  CHECK_THAT(ddprun::launcher::render_plan_text(r, p),
             Catch::Contains("cpu binding: cores, decided by each node's agent on its own topology"));
}

TEST_CASE("dry-run --cpu-bind in per-task mode binds this task's one worker in its own mask",
          "[plan][dryrun][cpubind]") {
  Resolved r;
  r.mode = Mode::per_task;
  r.context = SlurmContext::step;
  r.job.mode = Mode::per_task;
  r.job.nnodes = 1;
  r.job.task_rank = 1;
  r.job.task_local_rank = 1;
  r.cpu_bind = CpuBind::cores;
  Plan p = build_plan(r.job, nodes({2}));
  // srun gave this task CPUs 4-7 (its --cpu-bind); the one worker gets the whole mask.
  CHECK_FALSE(ddprun::launcher::bind_this_node(r, p, two_numa(), {4, 5, 6, 7}));
  CHECK(p.workers[0].cpus.empty());
  CHECK(format_cpu_list(p.workers[1].cpus) == "4-7");
  CHECK(p.workers[1].env.at("OMP_NUM_THREADS") == "4");
}
