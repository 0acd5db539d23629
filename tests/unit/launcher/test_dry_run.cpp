// The dry-run and startup-table rendering of the application layer.
#include <catch2/catch.hpp>

#include <algorithm>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/command.hpp"
#include "core/config.hpp"
#include "core/cpu_bind.hpp"
#include "core/json.hpp"
#include "core/plan.hpp"
#include "core/plan_table.hpp"
#include "launcher/dry_run.hpp"
#include "support/plan_nodes.hpp"
#include "support/whole_plan.hpp"

using namespace ddprun::core;
using ddprun::launcher::gpus_seen;
using ddprun::launcher::render_startup_table;

using ddprun::test::build_plan;
using ddprun::test::nodes;
using ddprun::test::Plan;
using ddprun::test::plan_to_json;

namespace {

std::string text_of(const ddprun::core::Resolved& r, const PlanTable& t) {
  std::ostringstream out;
  ddprun::launcher::write_plan_text(out, r, t);
  return out.str();
}

// The dry-run JSON as it was built before streaming: the whole tree, dumped once.
std::string json_reference(const ddprun::core::Resolved& r) {
  nlohmann::json j = plan_to_json(build_plan(r.job, r.nodes));
  for (auto& w : j.at("workers")) w["argv"] = worker_argv(r.command_spec, w.at("local_rank").get<int>());
  j["command"] = r.command;
  j["context"] = to_string(r.context);
  j["rdzv_endpoint"] = fmt::format("{}:{}", r.rdzv_host, r.rdzv_port);
  j["nnodes_min"] = r.nnodes_min;
  j["nnodes_max"] = r.nnodes_max;
  j["gpus_from_nodes"] = r.gpus_on_nodes;
  j["cpu_bind"] = to_string(r.cpu_bind);
  return dump_json(j, 2) + "\n";
}

}  // namespace

TEST_CASE("startup table: one row per node with ranks, GPUs and the master", "[plan][table]") {
  JobSpec job;
  job.mode = Mode::agent;
  job.nnodes = 2;
  job.gpus_per_proc = 1;
  job.master_addr = "node1";
  job.master_port = 20001;
  job.run_id = "99";
  std::string t = render_startup_table(make_plan_table(job, nodes({2, 2}, {"0", "1"})), 0);
  CHECK_THAT(t, Catch::Contains("run 99 attempt 0: 2 nodes, world size 4, master node1:20001"));
  CHECK_THAT(t, Catch::Contains("node2") && Catch::Contains("2-3") && Catch::Contains("2:0 3:1"));
  CHECK_THAT(t, Catch::Contains("gpus each rank sees (ranks:CUDA_VISIBLE_DEVICES)"));
  JobSpec big;
  big.mode = Mode::agent;
  big.nnodes = 40;
  std::vector<int> ones(40, 1);
  std::string bt = render_startup_table(make_plan_table(big, nodes(ones)), 1, 16);
  CHECK_THAT(
      bt, Catch::Contains("... 24 more nodes ...") && Catch::Contains("node40") && Catch::Contains("node1 "));
  CHECK(std::count(bt.begin(), bt.end(), '\n') == 2 + 16 + 1);
}

TEST_CASE("startup table: a standby shows as a row without ranks", "[plan][table][elastic]") {
  JobSpec job;
  job.mode = Mode::agent;
  job.nnodes = 2;
  auto n = nodes({2, 2, 2});
  n[2].standby = true;
  const std::string t = render_startup_table(make_plan_table(job, n), 0);
  CHECK_THAT(t, Catch::Contains("attempt 0: 2 nodes, world size 4, master 127.0.0.1:29500, 1 standby\n"));
  CHECK_THAT(t, Catch::Contains("  2     node3 standby -\n"));
}

TEST_CASE("startup table: the addresses the nodes advertise, when not their names", "[plan][table][iface]") {
  JobSpec job;
  job.mode = Mode::agent;
  job.nnodes = 2;
  job.master_addr = "10.20.0.1";
  job.master_port = 20001;
  auto n = nodes({1, 1});
  n[0].addr = "10.20.0.1";
  n[1].addr = "fd00:20::2";
  const std::string t = render_startup_table(make_plan_table(job, n), 0);
  CHECK_THAT(t, Catch::Contains("master 10.20.0.1:20001\n"));
  CHECK_THAT(t, Catch::Contains("  node  host  address    ranks gpus each rank sees"));
  CHECK_THAT(t, Catch::Contains("  0     node1 10.20.0.1  0     -\n"));
  CHECK_THAT(t, Catch::Contains("  1     node2 fd00:20::2 1     -\n"));
  n[0].addr = "node1";  // advertised names, as without --rdzv-iface: no column
  n[1].addr = "";
  const std::string plain = render_startup_table(make_plan_table(job, n), 0);
  CHECK_THAT(plain, !Catch::Contains("address"));
  CHECK_THAT(plain, Catch::Contains("  0     node1 0     -\n"));
  job.master_addr = "fd00:20::1";  // an IPv6 master in brackets, its port apart
  CHECK_THAT(render_startup_table(make_plan_table(job, n), 0),
             Catch::Contains("master [fd00:20::1]:20001\n"));
}

TEST_CASE("dry-run header: the address this node advertises and what it becomes", "[plan][iface]") {
  JobSpec job;
  job.mode = Mode::agent;
  job.nnodes = 2;
  PlanTable p = make_plan_table(job, nodes({1, 1}));
  ddprun::core::Resolved r;
  r.job = job;
  CHECK_THAT(text_of(r, p), !Catch::Contains("addresses:"));
  r.rdzv_iface = "ib0";
  CHECK_THAT(text_of(r, p), Catch::Contains("addresses: each node advertises its own address on ib0 "
                                            "(--rdzv-iface ib0); node 0's becomes MASTER_ADDR"));
  r.local_addr = "10.20.0.1";
  CHECK_THAT(text_of(r, p), Catch::Contains("addresses: this node advertises 10.20.0.1 (--rdzv-iface ib0); "
                                            "as node 0, it is MASTER_ADDR"));
  r.job.node_rank = 1;
  r.rdzv_iface.reset();
  CHECK_THAT(text_of(r, p), Catch::Contains("addresses: this node advertises 10.20.0.1 (--local-addr); node "
                                            "0's becomes MASTER_ADDR"));
}

TEST_CASE("startup line and dry-run header name a run id only when there is one", "[plan][table]") {
  JobSpec job;  // standalone: no Slurm job id and no --rdzv-id
  PlanTable p = make_plan_table(job, nodes({2}));
  const std::string t = render_startup_table(p, 0);
  CHECK_THAT(t, Catch::StartsWith("ddprun: attempt 0: 1 node, world size 2, master 127.0.0.1:29500\n"));
  CHECK_THAT(t, !Catch::Contains("none"));
  ddprun::core::Resolved r;
  r.job = job;
  std::string text = text_of(r, p);
  CHECK_THAT(
      text,
      Catch::StartsWith(
          "ddprun plan: standalone mode, 1 node, world size 2, master 127.0.0.1:29500\n"
          "master port 29500 is checked when the job starts: if it is busy then, a free one is used\n"));
  r.master_port_given = true;
  CHECK_THAT(text_of(r, p),
             Catch::Contains(
                 "master port 29500 is checked when the job starts: if it is busy then, the run stops\n"));
  r.master_port_given = false;
  job.run_id = "4242";
  p = make_plan_table(job, nodes({2}));
  CHECK_THAT(render_startup_table(p, 1), Catch::StartsWith("ddprun: run 4242 attempt 1: 1 node"));
  r.job = job;
  CHECK_THAT(text_of(r, p), Catch::Contains(", run id 4242\n"));
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
    CHECK_THAT(render_startup_table(make_plan_table(job, nodes({r.nproc, r.nproc}, r.gpus)), 0),
               Catch::Contains(" " + r.node1 + "\n"));
  }
}

TEST_CASE("the streamed dry-run JSON is the whole plan dumped at once, whatever the strings",
          "[plan][dryrun]") {
  ddprun::core::Resolved r;
  r.job.mode = Mode::agent;
  r.job.nnodes = 3;
  r.job.node_rank = 1;
  r.job.run_id = "a\"b\\\x01\xc3\xa9\xff";
  r.job.role = "t\tz";
  r.job.gpus_per_proc = 1;
  r.command = {"echo", "\xfe", "x y"};
  r.command_spec.command = r.command;
  r.nodes = nodes({2, 2, 2}, {"0", "g\"1"});
  r.nodes[0].host.reset();        // unknown outside Slurm: null
  r.nodes[2].host = "h\xe2\x82";  // truncated UTF-8
  std::ostringstream out;
  ddprun::launcher::write_plan_json(out, r, ddprun::launcher::dry_run_table(r));
  CHECK(out.str() == json_reference(r));
  // Spare nodes (standbys) run no workers: the workers are the plan's without them, and the standbys
  // are listed beside them (issue 14).
  auto with_standby = r;
  with_standby.nodes.push_back(with_standby.nodes[1]);
  with_standby.nodes.back().node_rank = 3;
  with_standby.nodes.back().host = "s\"3";
  with_standby.nodes.back().standby = true;
  std::ostringstream standby_out;
  ddprun::launcher::write_plan_json(standby_out, with_standby, ddprun::launcher::dry_run_table(with_standby));
  nlohmann::json want = nlohmann::json::parse(json_reference(r));
  want["standbys"] = nlohmann::json::array({{{"node_rank", 3}, {"host", "s\"3"}}});
  CHECK(standby_out.str() == dump_json(want, 2) + "\n");
  std::string text = text_of(r, ddprun::launcher::dry_run_table(r));
  const auto command = text.find("command:");
  const auto standby_row = fmt::format("{:<5} {:<5} {:>5} {:>6}  standby\n", 3, "s\"3", "-", "-");
  text = text.substr(0, command) + standby_row + text.substr(command);
  CHECK(text_of(with_standby, ddprun::launcher::dry_run_table(with_standby)) == text);
}

TEST_CASE("dry-run and startup table show the standbys of an elastic job", "[plan][dryrun][elastic]") {
  ddprun::core::Resolved r;
  r.mode = Mode::agent;
  r.context = SlurmContext::step;
  r.elastic = true;
  r.nnodes_min = r.nnodes_max = 2;
  r.nagents = 3;
  r.job.mode = Mode::agent;
  r.job.nnodes = 2;
  r.job.node_rank = 2;
  r.job.max_restarts = 3;
  r.command = r.command_spec.command = {"train"};
  r.nodes = nodes({1, 1, 1}, {});
  r.nodes[2].standby = true;
  const PlanTable t = ddprun::launcher::dry_run_table(r);
  const std::string text = text_of(r, t);
  CHECK_THAT(text,
             Catch::Contains("elastic: a lost node restarts the job without it (--max-restarts 3) while at "
                             "least 2 of 2 nodes remain; 1 standby node takes a lost node's place"));
  CHECK_THAT(text, Catch::Matches("(.|\n)*\n2 +node3 +- +- +standby  <- this node\n(.|\n)*"));
  const auto j = nlohmann::json::parse([&] {
    std::ostringstream out;
    ddprun::launcher::write_plan_json(out, r, t);
    return out.str();
  }());
  CHECK(j.at("elastic") == true);
  CHECK(j.at("standbys") == nlohmann::json::array({{{"node_rank", 2}, {"host", "node3"}}}));
  CHECK(j.at("workers").size() == 2);
  const std::string startup = render_startup_table(t, 0);
  CHECK_THAT(startup, Catch::Contains("2 nodes, world size 2"));
  CHECK_THAT(startup, Catch::Matches("(.|\n)*\n  2 +node3 +standby +-\n"));
}

TEST_CASE("dry-run: an elastic job says how far it can shrink, or that it survives no loss",
          "[plan][dryrun][elastic]") {
  auto elastic = [](int min, int max, int agents) {
    ddprun::core::Resolved r;
    r.mode = r.job.mode = Mode::agent;
    r.context = SlurmContext::none;
    r.elastic = true;
    r.nnodes_min = min;
    r.nnodes_max = max;
    r.nagents = agents;
    r.job.nnodes = max;
    r.job.max_restarts = 3;
    r.command = r.command_spec.command = {"train"};
    std::vector<int> local(static_cast<std::size_t>(agents), 1);
    r.nodes = nodes(local, {});
    for (int n = max; n < agents; ++n) r.nodes[static_cast<std::size_t>(n)].standby = true;
    return text_of(r, ddprun::launcher::dry_run_table(r));
  };
  // --nnodes 1:2: one node left of two is no majority, MIN notwithstanding.
  CHECK_THAT(
      elastic(1, 2, 2),
      Catch::Contains("elastic (--max-restarts 3), but this elastic job survives no lost node: 1 of its 2 "
                      "nodes left would not be a strict majority of the last round; run 3 nodes or more") &&
          !Catch::Contains("while at least"));
  // --nnodes 1:4 shrinks to 2, not to MIN 1.
  CHECK_THAT(elastic(1, 4, 4),
             Catch::Contains("while at least 2 of 4 nodes remain; no standby nodes; each loss "
                             "must leave a strict majority of the last round"));
  // A standby makes two nodes survive one loss.
  CHECK_THAT(elastic(2, 2, 3), Catch::Contains("while at least 2 of 2 nodes remain; 1 standby node takes"));
}

namespace {

// 2 NUMA nodes of 4 single-thread cores; GPU 0 on node 1, GPU 1 on node 0.
Topology two_numa() {
  Topology t;
  for (int c = 0; c < 8; ++c) t.cores.push_back({{c}, c / 4});
  t.gpu_numa = {{"0", {1}}, {"1", {0}}};
  return t;
}

std::string json_of(const ddprun::core::Resolved& r, const PlanTable& t, const std::vector<Worker>& bound) {
  std::ostringstream out;
  ddprun::launcher::write_plan_json(out, r, t, bound);
  return out.str();
}

std::string bound_text(const ddprun::core::Resolved& r, const PlanTable& t,
                       const std::vector<Worker>& bound) {
  std::ostringstream out;
  ddprun::launcher::write_plan_text(out, r, t, bound);
  return out.str();
}

}  // namespace

TEST_CASE("dry-run --cpu-bind shows this node's CPUs and '?' for other nodes", "[plan][dryrun][cpubind]") {
  ddprun::core::Resolved r;
  r.mode = Mode::agent;
  r.context = SlurmContext::step;
  r.job.mode = Mode::agent;
  r.job.nnodes = 2;
  r.job.node_rank = 1;
  r.job.gpus_per_proc = 1;
  r.cpu_bind = CpuBind::gpu;
  r.command = r.command_spec.command = {"train"};
  r.nodes = nodes({2, 2}, {"0", "1"});
  const PlanTable t = ddprun::launcher::dry_run_table(r);
  const auto b = ddprun::launcher::bind_this_node(r, t, two_numa(), {0, 1, 2, 3, 4, 5, 6, 7});
  CHECK_FALSE(b.warning);
  REQUIRE(b.workers.size() == 2);  // node 0 decides on its own machine
  CHECK(format_cpu_list(b.workers[0].cpus) == "4-7");
  CHECK(format_cpu_list(b.workers[1].cpus) == "0-3");
  CHECK(b.workers[1].env.at("OMP_NUM_THREADS") == "4");
  const std::string text = bound_text(r, t, b.workers);
  CHECK_THAT(text, Catch::Contains("cpu binding: gpu; cpus are this node's"));
  CHECK_THAT(text, Catch::Contains("  cpus\n"));
  CHECK_THAT(text, Catch::Contains("  ?  "));
  CHECK_THAT(text, Catch::Contains("  4-7" + std::string(11, ' ') + "<- this node"));
  const auto j = nlohmann::json::parse(json_of(r, t, b.workers));
  CHECK(j.at("cpu_bind") == "gpu");
  CHECK(j.at("workers").at(0).at("cpus").is_null());
  CHECK(j.at("workers").at(3).at("cpus") == nlohmann::json({0, 1, 2, 3}));
  CHECK(j.at("workers").at(3).at("env").at("OMP_NUM_THREADS") == "4");
}

TEST_CASE("dry-run --cpu-bind: errors before anything starts, a batch script binds nothing",
          "[plan][dryrun][cpubind]") {
  ddprun::core::Resolved r;
  r.job.nnodes = 1;
  r.cpu_bind = CpuBind::cores;
  r.command = r.command_spec.command = {"train"};
  r.nodes = nodes({3});
  const PlanTable t = ddprun::launcher::dry_run_table(r);
  CHECK_THROWS_WITH(ddprun::launcher::bind_this_node(r, t, two_numa(), {0, 1}),
                    Catch::StartsWith("--cpu-bind cores: 3 workers but only 2 cores available"));
  r.context = SlurmContext::batch;
  const auto b = ddprun::launcher::bind_this_node(r, t, two_numa(), {0, 1});
  CHECK_FALSE(b.warning);
  CHECK(b.workers.empty());
  CHECK_THAT(bound_text(r, t, b.workers),
             Catch::Contains("cpu binding: cores, decided by each node's agent on its own topology"));
}

TEST_CASE("dry-run --cpu-bind in per-task mode binds this task's one worker in its own mask",
          "[plan][dryrun][cpubind]") {
  ddprun::core::Resolved r;
  r.mode = Mode::per_task;
  r.context = SlurmContext::step;
  r.job.mode = Mode::per_task;
  r.job.nnodes = 1;
  r.job.task_rank = 1;
  r.job.task_local_rank = 1;
  r.cpu_bind = CpuBind::cores;
  r.nodes = nodes({2});
  const PlanTable t = ddprun::launcher::dry_run_table(r);
  // srun gave this task CPUs 4-7 (its --cpu-bind); the one worker gets the whole mask.
  const auto b = ddprun::launcher::bind_this_node(r, t, two_numa(), {4, 5, 6, 7});
  CHECK_FALSE(b.warning);
  REQUIRE(b.workers.size() == 1);
  CHECK(b.workers[0].rank == 1);
  CHECK(format_cpu_list(b.workers[0].cpus) == "4-7");
  CHECK(b.workers[0].env.at("OMP_NUM_THREADS") == "4");
}
