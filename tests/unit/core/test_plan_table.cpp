// The published plan (issue 16): job constants plus a node table, from which each node derives its
// own workers. The derivation must give exactly the plan ddprun built before (old_plan.hpp) for
// every shape, and the compact codec must carry any table and refuse bad bytes with core::Error.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <fmt/ranges.h>

#include "core/checks.hpp"
#include "core/json.hpp"
#include "core/plan_table.hpp"
#include "old_plan.hpp"
#include "support/whole_plan.hpp"

using namespace ddprun::core;
using ddprun::test::build_plan;
using ddprun::test::Plan;
using ddprun::test::plan_to_json;

namespace {

struct Shape {
  std::string name;
  Mode mode;
  std::vector<int> lws;
  std::vector<std::string> gpus;
  int g = 0;
  int p = 1;
  int node_rank = 0;
  std::optional<int> task_rank;
  std::optional<int> task_local_rank;
  bool unknown_hosts = false;
};

NodeSpec node(int rank, std::optional<std::string> host, int lws, std::vector<std::string> gpus = {},
              bool standby = false) {
  NodeSpec n;
  n.node_rank = rank;
  n.host = std::move(host);
  n.local_world_size = lws;
  n.gpus = std::move(gpus);
  n.addr = n.host.value_or("");
  n.standby = standby;
  return n;
}

JobSpec job_of(const Shape& s) {
  JobSpec job;
  job.mode = s.mode;
  job.nnodes = static_cast<int>(s.lws.size());
  job.node_rank = s.node_rank;
  job.gpus_per_proc = s.g;
  job.procs_per_replica = s.p;
  job.master_addr = "h0";
  job.master_port = 29517;
  job.run_id = "r\"1\xff";
  job.restart_count = 2;
  job.requeue_count = 1;
  job.max_restarts = 5;
  job.task_rank = s.task_rank;
  job.task_local_rank = s.task_local_rank;
  if (s.name == "cpus") job.cpus_per_task = 12;
  if (s.name == "omp") {
    job.user_omp_num_threads = "7";
    job.user_set_nccl_async = true;
  }
  return job;
}

std::vector<NodeSpec> nodes_of(const Shape& s) {
  std::vector<NodeSpec> out;
  for (std::size_t i = 0; i < s.lws.size(); ++i) {
    NodeSpec n = node(static_cast<int>(i), "h" + std::to_string(i), s.lws[i], s.gpus);
    if (s.unknown_hosts && static_cast<int>(i) != s.node_rank) n.host.reset();
    out.push_back(n);
  }
  return out;
}

Shape shape(std::string name, Mode mode, std::vector<int> lws, std::vector<std::string> gpus, int g = 0,
            int p = 1, int node_rank = 0, std::optional<int> task_rank = std::nullopt,
            std::optional<int> task_local_rank = std::nullopt, bool unknown_hosts = false) {
  return {std::move(name), mode,      std::move(lws),  std::move(gpus), g, p,
          node_rank,       task_rank, task_local_rank, unknown_hosts};
}

std::vector<Shape> shapes() {
  const std::vector<std::string> g8 = {"0", "1", "2", "3", "4", "5", "6", "7"};
  return {
      shape("standalone", Mode::standalone, {4}, {}),
      shape("standalone-gpus", Mode::standalone, {2}, {"0", "1"}),
      shape("agent", Mode::agent, {2, 2, 2}, {}, 0, 1, 1),
      shape("hetero", Mode::agent, {3, 1, 5, 2}, {}, 0, 1, 3),
      shape("gpu-slices-g2", Mode::agent, {4, 4}, g8, 2, 1, 1),
      shape("gpu-slices-g4-spare-gpus", Mode::agent, {1, 1}, g8, 4),
      shape("all-gpus", Mode::agent, {2, 2}, {"4", "5"}),
      shape("mp-dp", Mode::agent, {4, 4, 8}, {}, 0, 2, 2),
      shape("mp-dp-gpus", Mode::agent, {4, 4}, g8, 2, 4, 1),
      shape("cpus", Mode::agent, {3, 3}, {}),
      shape("omp", Mode::agent, {2, 1}, {}),
      shape("unknown-hosts", Mode::agent, {2, 2, 2}, {}, 0, 1, 1, std::nullopt, std::nullopt, true),
      shape("per-task", Mode::per_task, {4, 2}, {"0"}, 0, 1, 1, 5, 1),
      shape("per-task-cyclic", Mode::per_task, {2, 2}, {"0"}, 0, 1, 1, 1, 0),
      shape("per-task-g1", Mode::per_task, {2, 2}, {"3"}, 1, 1, 0, 0, 0),
      shape("per-task-g2-node-gpus", Mode::per_task, {2, 2}, {"0", "1", "2", "3"}, 2, 1, 1, 3, 1),
      shape("per-task-cpus", Mode::per_task, {3, 3}, {}, 0, 1, 0, 2, 2),
  };
}

}  // namespace

TEST_CASE("build_plan through the node table equals the plan built before, for every shape",
          "[plan][table]") {
  for (const auto& s : shapes()) {
    INFO(s.name);
    const JobSpec job = job_of(s);
    const Plan expected = ddprun::test::oldplan::build_plan(job, nodes_of(s));
    const Plan got = build_plan(job, nodes_of(s));
    CHECK(dump_json(plan_to_json(got), 2) == dump_json(plan_to_json(expected), 2));
  }
}

TEST_CASE("each node derives its own workers from the decoded table, as in the whole plan", "[plan][table]") {
  for (const auto& s : shapes()) {
    INFO(s.name);
    const JobSpec job = job_of(s);
    const Plan expected = ddprun::test::oldplan::build_plan(job, nodes_of(s));
    // What an agent holds: the published bytes, decoded.
    const PlanTable table = decode_plan_table(encode_plan_table(make_plan_table(job, nodes_of(s))));
    CHECK(table.job.world_size == expected.world_size);
    for (int n = 0; n < job.nnodes; ++n) {
      INFO("node " << n);
      const auto mine = derive_workers(table, n, task_slot(job));
      const auto want = expected.workers_on(n);
      REQUIRE(mine.size() == want.size());
      for (std::size_t i = 0; i < mine.size(); ++i) {
        CHECK(mine[i].rank == want[i].rank);
        CHECK(mine[i].local_rank == want[i].local_rank);
        CHECK(mine[i].host == want[i].host);
        CHECK(mine[i].gpus == want[i].gpus);
        CHECK(mine[i].env == want[i].env);
      }
    }
  }
}

TEST_CASE("standby nodes follow the active ones and run no workers", "[plan][table]") {
  JobSpec job;
  job.mode = Mode::agent;
  job.nnodes = 2;
  std::vector<NodeSpec> ns = {node(0, "a", 2), node(1, "b", 2), node(2, "s1", 2, {}, true)};
  const PlanTable t = make_plan_table(job, ns);
  CHECK(t.job.world_size == 4);
  CHECK(t.nodes[2].standby);
  CHECK(t.nodes[2].first_rank == -1);
  CHECK(derive_workers(t, 2).empty());
  CHECK(derive_workers(t, 1).at(1).env.at("GROUP_WORLD_SIZE") == "2");
  CHECK(decode_plan_table(encode_plan_table(t)) == t);
  const Plan p = build_plan(job, ns);
  CHECK(p.world_size == 4);
  CHECK(p.workers.size() == 4);
  // A standby before an active node is refused.
  ns[1].standby = true;
  ns[2].standby = false;
  CHECK_THROWS_WITH(make_plan_table(job, ns), Catch::Contains("standby nodes must follow the 2 active ones"));
  CHECK_THROWS_WITH(derive_workers(t, 3), Catch::Contains("node rank 3 is not in the plan"));
}

TEST_CASE("a job spec's bad numbers are refused in the words the options use", "[plan][table]") {
  JobSpec job;
  job.mode = Mode::agent;
  job.nnodes = 1;
  const std::vector<NodeSpec> ns = {node(0, "a", 2)};
  job.procs_per_replica = 0;
  CHECK_THROWS_WITH(make_plan_table(job, ns), *procs_per_replica_error(0));
  job.procs_per_replica = 1;
  job.gpus_per_proc = -2;
  CHECK_THROWS_WITH(make_plan_table(job, ns), *gpus_per_proc_error(-2));
  job.gpus_per_proc = 0;  // not given
  CHECK_NOTHROW(make_plan_table(job, ns));
}

TEST_CASE("the table codec carries any strings, unknown hosts and addresses", "[plan][table][codec]") {
  PlanTable t;
  t.job.mode = Mode::per_task;
  t.job.nnodes = 3;
  t.job.world_size = 4;
  t.job.master_addr = "fe80::1%eth0";
  t.job.run_id = std::string("a b\n~=%\0z", 10);
  t.job.role = "";
  t.job.user_omp_num_threads = " ";
  t.job.cpus_per_task = 0;
  t.nodes = {{"node 1", "node 1", 0, 1, {"0", "", "a,b"}, false},
             {std::nullopt, "10.0.0.2", 1, 2, {}, false},
             {"~", "=", 3, 1, {"0", "", "a,b"}, false},
             {"", "", -1, 1, {}, true}};
  t.nodes[3].first_rank = -1;
  const std::string bytes = encode_plan_table(t);
  CHECK(bytes.find('"') == std::string::npos);
  CHECK(bytes.find('\\') == std::string::npos);
  CHECK(decode_plan_table(bytes) == t);
}

TEST_CASE("the table decoder refuses bad bytes with a one-line core::Error", "[plan][table][codec]") {
  JobSpec job;
  job.mode = Mode::agent;
  job.nnodes = 2;
  const std::string good =
      encode_plan_table(make_plan_table(job, {node(0, "a", 2, {"0", "1"}), node(1, "b", 2, {"0", "1"})}));
  REQUIRE_NOTHROW(decode_plan_table(good));
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const auto at = s.find(from);
    REQUIRE(at != std::string::npos);
    return s.replace(at, from.size(), to);
  };
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"", "not a ddprun plan"},
      {"{\"plan\":1}", "not a ddprun plan"},
      {with("ddprun-plan 2", "ddprun-plan 1"), "version 2"},
      {with("mode agent", "mode boss"), "unknown mode"},
      {with("mode agent", "colour blue"), "unknown field"},
      {with("master_port ", "master_port 99999\nx"), "99999"},
      {with("nnodes 2\n", "nnodes 2\nnnodes 2\n"), "appears twice"},
      {with("world_size 4", "world_size 5"), "world_size says 5"},
      {with("world_size 4\n", ""), "no 'world_size' line"},
      {with("\nnodes 2", "\nnodes 3"), "'nodes 3' but 2 rows follow"},
      {with("\nnodes 2", "\nnodes 1"), "more rows than 'nodes 1'"},
      {with("a = 2 0 a\nb = 2 0 a", "x[1-3] * 2 0 a"), "more rows than 'nodes 2'"},
      {with("a = 2 0 a\nb = 2 0 a", "x[3-1] * 2 0 a"), "x[3-1]"},
      {with("a = 2 0 a", "a = 2 7 a"), "gpuset 7 is not defined"},
      {with("a = 2 0 a", "a = 2 0"), "5 fields"},
      {with("a = 2 0 a", "a = 2 0 x"), "a (active) or s (standby)"},
      {with("a = 2 0 a", "a = 0 0 a"), "not a number from 1"},
      {with("a = 2 0 a", "a%zz = 2 0 a"), "bad character or escape"},
      {with("a = 2 0 a", "a\"b = 2 0 a"), "bad character or escape"},
      {with("b = 2 0 a", "b = 2 0 s"), "node rank 1: standby rows must follow"},
      {with("gpuset 2 0 1", "gpuset 3 0 1"), "gpuset says 3 ids but has 2"},
      {good.substr(0, good.rfind("\nnodes ") + 1), "no 'nodes' line"},
  };
  for (const auto& [bytes, culprit] : bad) {
    INFO(bytes);
    try {
      decode_plan_table(bytes);
      FAIL("decoded");
    } catch (const Error& e) {
      CHECK_THAT(e.what(), Catch::StartsWith("malformed plan: line ") && Catch::Contains(culprit));
      CHECK(std::string(e.what()).find('\n') == std::string::npos);
    }
  }
  // Slices that make_plan_table would refuse are refused on the wire too.
  job.gpus_per_proc = 2;
  const std::string sliced =
      encode_plan_table(make_plan_table(job, {node(0, "a", 1, {"0", "1"}), node(1, "b", 1, {"0", "1"})}));
  std::string s = sliced;
  s.replace(s.find("a = 1"), 5, "a = 2");
  s.replace(s.find("world_size 2"), 12, "world_size 3");
  CHECK_THROWS_WITH(decode_plan_table(s), Catch::Contains("cannot be cut into gpus_per_proc slices"));
}

TEST_CASE("the published table stays within 64 bytes a node plus 4 KB", "[plan][table][codec]") {
  for (int n : {64, 2048, 16384}) {
    JobSpec job;
    job.mode = Mode::agent;
    job.nnodes = n;
    job.master_addr = "gpu-node-00001.cluster.example.org";
    job.run_id = "123456789.0";
    std::vector<NodeSpec> ns;
    for (int i = 0; i < n; ++i) {
      const std::string host = fmt::format("gpu-node-{:05}", i + 1);
      ns.push_back(node(i, host, 8, {"0", "1", "2", "3", "4", "5", "6", "7"}));
    }
    const std::string bytes = encode_plan_table(make_plan_table(job, ns));
    INFO(n << " nodes: " << bytes.size() << " bytes");
    // The rendezvous wraps it in a JSON record that adds the join bookkeeping (docs/protocol.md):
    // the table itself takes at most half of the budget.
    CHECK(bytes.size() <= 32u * static_cast<unsigned>(n) + 2048u);
  }
}

TEST_CASE("rows alike with hosts Slurm folds travel as one run line", "[plan][table][codec]") {
  JobSpec job;
  job.mode = Mode::agent;
  job.nnodes = 16384;
  const std::vector<std::string> gpus = {"0", "1", "2", "3", "4", "5", "6", "7"};
  std::vector<NodeSpec> ns;
  for (int i = 0; i < 16384; ++i) ns.push_back(node(i, fmt::format("gpu-node-{:05}", i + 1), 8, gpus));
  const PlanTable uniform = make_plan_table(job, ns);
  const std::string bytes = encode_plan_table(uniform);
  CHECK(bytes.find("\ngpu-node-[00001-16384] * 8 0 a\n") != std::string::npos);
  CHECK(bytes.size() < 1024);
  CHECK(decode_plan_table(bytes) == uniform);

  // Runs break where a row differs: another size, GPU list, address, standby flag, or a name that does
  // not fold; a gap in the numbers stays inside the bracket.
  job.nnodes = 9;
  ns = {node(0, "login1", 8, gpus),         node(1, "gpu-node-00001", 8, gpus),
        node(2, "gpu-node-00002", 8, gpus), node(3, "gpu-node-00004", 8, gpus),
        node(4, "gpu-node-00005", 4, gpus), node(5, "gpu-node-00006", 4, gpus),
        node(6, "cpu7", 4, gpus),           node(7, "cpu8", 4, {"0"}),
        node(8, "cpu9", 4, {"0"}),          node(9, "spare1", 8, gpus, true),
        node(10, "spare2", 8, gpus, true)};
  ns[2].addr = "10.0.0.2";
  PlanTable mixed = make_plan_table(job, ns);
  const std::string lines = encode_plan_table(mixed);
  INFO(lines);
  CHECK(lines.find("\nlogin1 = 8 0 a\ngpu-node-00001 = 8 0 a\ngpu-node-00002 10.0.0.2 8 0 a\n") !=
        std::string::npos);
  CHECK(lines.find("\ngpu-node-[00004-00006] * 8 0 a\n") == std::string::npos);
  CHECK(lines.find("\ngpu-node-00004 = 8 0 a\ngpu-node-[00005-00006] * 4 0 a\ncpu7 = 4 0 a\n") !=
        std::string::npos);
  CHECK(lines.find("\ncpu[8-9] * 4 1 a\nspare[1-2] * 8 0 s\n") != std::string::npos);
  CHECK(decode_plan_table(lines) == mixed);
  // A gap folds into one bracket.
  job.nnodes = 3;
  mixed = make_plan_table(job, {node(0, "n1", 1), node(1, "n2", 1), node(2, "n4", 1)});
  CHECK(encode_plan_table(mixed).find("\nn[1-2%2C4] * 1 0 a\n") != std::string::npos);
  CHECK(decode_plan_table(encode_plan_table(mixed)) == mixed);
}

TEST_CASE("names that fold into no run still fit the budget", "[plan][table][codec]") {
  JobSpec job;
  job.mode = Mode::agent;
  job.nnodes = 16384;
  std::vector<NodeSpec> ns;
  for (int i = 0; i < 16384; ++i) {
    // Scattered names: no two consecutive rows share a prefix a bracket could fold.
    const auto h = static_cast<std::uint32_t>(i) * 2654435761u;
    ns.push_back(node(i, fmt::format("h{:08x}x", h), 8, {"0", "1", "2", "3", "4", "5", "6", "7"}));
  }
  const PlanTable t = make_plan_table(job, ns);
  const std::string bytes = encode_plan_table(t);
  CHECK(bytes.find(" * ") == std::string::npos);
  CHECK(bytes.size() <= 32u * 16384u + 2048u);
  CHECK(decode_plan_table(bytes) == t);
}

TEST_CASE("virtual local rank: LOCAL_RANK 0 and only the worker's own GPUs", "[plan][table][virtual]") {
  struct Row {
    std::string name;
    Mode mode;
    int lws;
    std::vector<std::string> gpus;  // the node's
    int g;
    std::vector<std::vector<std::string>> want;  // each local rank's CUDA_VISIBLE_DEVICES, empty: unset
  };
  const std::vector<Row> rows = {
      {"one GPU each at its local rank",
       Mode::agent,
       4,
       {"4", "5", "6", "7"},
       0,
       {{"4"}, {"5"}, {"6"}, {"7"}}},
      {"more GPUs than workers", Mode::agent, 2, {"0", "1", "2", "3"}, 0, {{"0"}, {"1"}}},
      {"a --gpus-per-proc slice each", Mode::agent, 2, {"0", "1", "2", "3"}, 2, {{"0", "1"}, {"2", "3"}}},
      {"no GPUs: nothing to narrow", Mode::agent, 3, {}, 0, {{}, {}, {}}},
      {"one GPU for the node, as before", Mode::agent, 1, {"3"}, 0, {{"3"}}},
      {"a task srun gave one GPU keeps it", Mode::per_task, 2, {"1"}, 0, {{"1"}, {"1"}}},
  };
  for (const Row& r : rows) {
    INFO(r.name);
    JobSpec job;
    job.mode = r.mode;
    job.gpus_per_proc = r.g;
    job.virtual_local_rank = true;
    const PlanTable t =
        decode_plan_table(encode_plan_table(make_plan_table(job, {node(0, "h", r.lws, r.gpus)})));
    CHECK(t.job.virtual_local_rank);
    const auto ws = derive_workers(t, 0);
    REQUIRE(ws.size() == r.want.size());
    for (std::size_t i = 0; i < ws.size(); ++i) {
      INFO("local rank " << i);
      CHECK(ws[i].local_rank == static_cast<int>(i));  // ddprun's own local rank: log prefixes, filters
      CHECK(ws[i].env.at("LOCAL_RANK") == "0");
      CHECK(ws[i].env.at("RANK") == std::to_string(i));
      CHECK(ws[i].env.at("DDPRUN_MP_RANK") == "0");
      CHECK(ws[i].gpus == r.want[i]);
      if (r.want[i].empty()) {
        CHECK(ws[i].env.count("CUDA_VISIBLE_DEVICES") == 0);
      } else {
        CHECK(ws[i].env.at("CUDA_VISIBLE_DEVICES") == fmt::format("{}", fmt::join(r.want[i], ",")));
      }
    }
    job.virtual_local_rank = false;  // without it: the real local rank, and the GPUs as before
    const auto plain = derive_workers(make_plan_table(job, {node(0, "h", r.lws, r.gpus)}), 0);
    CHECK(plain.back().env.at("LOCAL_RANK") == std::to_string(r.lws - 1));
    if (r.g == 0 && r.gpus.size() > 1) CHECK(plain.back().gpus == r.gpus);
  }
}

TEST_CASE("virtual local rank with fewer GPUs than workers is a one-line error", "[plan][table][virtual]") {
  JobSpec job;
  job.mode = Mode::agent;
  job.virtual_local_rank = true;
  CHECK_THROWS_WITH(
      make_plan_table(job, {node(0, "h", 3, {"0", "1"})}),
      Catch::Contains("node 0 has 2 visible GPUs (0,1), too few") && Catch::Contains("--virtual-local-rank"));
  PlanTable t = make_plan_table(job, {node(0, "h", 2, {"0", "1"})});
  t.nodes[0].local_world_size = 3;  // a table from the wire that no encoder would write
  CHECK_THROWS_WITH(decode_plan_table(encode_plan_table(t)), Catch::Contains("virtual_local_rank"));
}
