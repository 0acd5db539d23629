// --cpu-bind's pure decision on hand-built topologies (the hwloc reader has its own tests in
// tests/unit/agent/test_topology.cpp).
#include <catch2/catch.hpp>

#include <numeric>

#include "core/cpu_bind.hpp"
#include "core/error.hpp"

using namespace ddprun::core;

namespace {

// `packages` x `numa_per_package` x `cores_per_numa` cores of 2 hardware threads each, numbered as
// Linux often does on Intel: core c has PUs c and c + total_cores.
Topology machine(int packages, int numa_per_package, int cores_per_numa) {
  Topology t;
  const int total = packages * numa_per_package * cores_per_numa;
  for (int c = 0; c < total; ++c) t.cores.push_back({{c, c + total}, c / cores_per_numa});
  return t;
}

std::set<int> all_of(const Topology& t) {
  std::set<int> s;
  for (const auto& c : t.cores) s.insert(c.pus.begin(), c.pus.end());
  return s;
}

std::vector<std::optional<std::string>> no_gpus(int n) {
  return std::vector<std::optional<std::string>>(static_cast<std::size_t>(n));
}

std::vector<std::optional<std::string>> gpus(std::vector<std::string> ids) {
  return {ids.begin(), ids.end()};
}

}  // namespace

TEST_CASE("cpu-bind: modes parse, a bad one names the option", "[cpubind]") {
  CHECK(parse_cpu_bind("none") == CpuBind::none);
  CHECK(parse_cpu_bind("cores") == CpuBind::cores);
  CHECK(parse_cpu_bind("numa") == CpuBind::numa);
  CHECK(parse_cpu_bind("gpu") == CpuBind::gpu);
  CHECK_THROWS_WITH(parse_cpu_bind("socket"), Catch::Contains("--cpu-bind 'socket'"));
}

TEST_CASE("cpu-bind none binds nothing", "[cpubind]") {
  const Topology t = machine(2, 2, 8);
  const CpuBinding b = decide_cpu_binding(CpuBind::none, t, all_of(t), no_gpus(4));
  CHECK(b.cpus.empty());
  std::vector<Worker> ws(2);
  ws[0].env["OMP_NUM_THREADS"] = "1";
  apply_cpu_binding(b, false, ws);
  CHECK(ws[0].cpus.empty());
  CHECK(ws[0].env["OMP_NUM_THREADS"] == "1");
}

TEST_CASE("cpu-bind cores: disjoint, equal, contiguous shares with hyper-threads together", "[cpubind]") {
  const Topology t = machine(2, 2, 8);  // 32 cores, PUs 0-63
  const CpuBinding b = decide_cpu_binding(CpuBind::cores, t, all_of(t), no_gpus(4));
  REQUIRE(b.cpus.size() == 4);
  CHECK(b.cpus[0] == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 32, 33, 34, 35, 36, 37, 38, 39});
  CHECK(format_cpu_list(b.cpus[3]) == "24-31,56-63");
  CHECK(b.threads == std::vector<int>{8, 8, 8, 8});
  CHECK_FALSE(b.warning);
  // 3 workers on 32 cores: 10 each, the 2 left over stay unused.
  const CpuBinding three = decide_cpu_binding(CpuBind::cores, t, all_of(t), no_gpus(3));
  CHECK(format_cpu_list(three.cpus[2]) == "20-29,52-61");
  CHECK(three.threads == std::vector<int>{10, 10, 10});
}

TEST_CASE("cpu-bind cores stays inside the agent's affinity and never widens it", "[cpubind]") {
  const Topology t = machine(2, 2, 8);
  // A Slurm cgroup with cores 4-7 (both threads) and only the first thread of core 8.
  const std::set<int> allowed = {4, 5, 6, 7, 36, 37, 38, 39, 8};
  const CpuBinding b = decide_cpu_binding(CpuBind::cores, t, allowed, no_gpus(5));
  REQUIRE(b.cpus.size() == 5);
  CHECK(format_cpu_list(b.cpus[0]) == "4,36");
  CHECK(format_cpu_list(b.cpus[4]) == "8");
  for (const auto& c : b.cpus) {
    for (int cpu : c) CHECK(allowed.count(cpu) == 1);
  }
}

TEST_CASE("cpu-bind cores: more workers than cores is a one-line error", "[cpubind][error]") {
  const Topology t = machine(1, 1, 2);
  CHECK_THROWS_WITH(decide_cpu_binding(CpuBind::cores, t, all_of(t), no_gpus(4)),
                    "--cpu-bind cores: 4 workers but only 2 cores available to this agent; run at most 2 "
                    "workers per node, or use --cpu-bind numa or none");
  const Topology one = machine(1, 1, 1);
  CHECK_THROWS_WITH(decide_cpu_binding(CpuBind::cores, one, all_of(one), no_gpus(2)),
                    "--cpu-bind cores: 2 workers but only 1 core available to this agent; run at most 1 "
                    "worker per node, or use --cpu-bind numa or none");
  // Hyper-threads are not cores: 2 cores with 4 PUs still take 2 workers at most.
  CHECK_THROWS_AS(decide_cpu_binding(CpuBind::cores, t, all_of(t), no_gpus(3)), Error);
  CHECK_THROWS_WITH(decide_cpu_binding(CpuBind::cores, t, {99}, no_gpus(1)),
                    Catch::Contains("none of the CPUs this agent may use"));
}

TEST_CASE("cpu-bind numa: workers in blocks over the nodes, each bound to its node's cores", "[cpubind]") {
  const Topology t = machine(2, 2, 8);  // NUMA n holds cores 8n..8n+7
  const CpuBinding b = decide_cpu_binding(CpuBind::numa, t, all_of(t), no_gpus(8));
  REQUIRE(b.cpus.size() == 8);
  CHECK(format_cpu_list(b.cpus[0]) == "0-7,32-39");
  CHECK(b.cpus[1] == b.cpus[0]);  // local ranks 0 and 1 share node 0
  CHECK(format_cpu_list(b.cpus[2]) == "8-15,40-47");
  CHECK(format_cpu_list(b.cpus[7]) == "24-31,56-63");
  CHECK(b.threads[0] == 4);  // 8 cores shared by two workers: no oversubscription by OpenMP
  // Fewer workers than nodes: spread out, not packed on the first nodes.
  const CpuBinding two = decide_cpu_binding(CpuBind::numa, t, all_of(t), no_gpus(2));
  CHECK(format_cpu_list(two.cpus[0]) == "0-7,32-39");
  CHECK(format_cpu_list(two.cpus[1]) == "16-23,48-55");
  CHECK(two.threads == std::vector<int>{8, 8});
}

TEST_CASE("cpu-bind numa: nodes outside the affinity are not used", "[cpubind]") {
  const Topology t = machine(2, 2, 8);
  std::set<int> allowed;
  for (int c = 16; c < 24; ++c) allowed.insert(c);  // NUMA node 2, first threads only
  const CpuBinding b = decide_cpu_binding(CpuBind::numa, t, allowed, no_gpus(2));
  CHECK(format_cpu_list(b.cpus[0]) == "16-23");
  CHECK(b.cpus[1] == b.cpus[0]);
}

TEST_CASE("cpu-bind gpu: each worker on the NUMA node of its first GPU", "[cpubind]") {
  Topology t = machine(2, 2, 8);
  t.gpu_numa = {{"0", {0}}, {"1", {1}}, {"2", {2}}, {"3", {3}}, {"GPU-abc", {3}}};
  // Workers see GPUs in an order that is not the NUMA order.
  const CpuBinding b = decide_cpu_binding(CpuBind::gpu, t, all_of(t), gpus({"3", "0", "GPU-abc"}));
  CHECK_FALSE(b.warning);
  CHECK(format_cpu_list(b.cpus[0]) == "24-31,56-63");
  CHECK(format_cpu_list(b.cpus[1]) == "0-7,32-39");
  CHECK(b.cpus[2] == b.cpus[0]);
  CHECK(b.threads == std::vector<int>{4, 8, 4});
  // A GPU under a package whose two NUMA nodes hwloc cannot tell apart: both nodes.
  t.gpu_numa["4"] = {2, 3};
  const CpuBinding wide = decide_cpu_binding(CpuBind::gpu, t, all_of(t), gpus({"4"}));
  CHECK(format_cpu_list(wide.cpus[0]) == "16-31,48-63");
}

TEST_CASE("cpu-bind gpu falls back to numa with one warning when locality is unknown", "[cpubind]") {
  Topology t = machine(2, 2, 8);
  t.gpu_numa = {{"0", {0}}, {"1", {3}}};
  const CpuBinding numa = decide_cpu_binding(CpuBind::numa, t, all_of(t), no_gpus(2));

  const CpuBinding no_gpu = decide_cpu_binding(CpuBind::gpu, t, all_of(t), no_gpus(2));
  REQUIRE(no_gpu.warning);
  CHECK(*no_gpu.warning ==
        "--cpu-bind gpu: local rank 0 has no GPU; binding by NUMA node instead, as --cpu-bind numa");
  CHECK(no_gpu.cpus == numa.cpus);

  const CpuBinding unknown = decide_cpu_binding(CpuBind::gpu, t, all_of(t), gpus({"0", "7"}));
  REQUIRE(unknown.warning);
  CHECK_THAT(*unknown.warning, Catch::Contains("no NUMA locality for GPU 7 (local rank 1)"));
  CHECK(unknown.cpus == numa.cpus);

  // GPU 1's node is outside the agent's affinity: never widen it, fall back within it.
  std::set<int> allowed;
  for (int c = 0; c < 8; ++c) allowed.insert(c);
  const CpuBinding outside = decide_cpu_binding(CpuBind::gpu, t, allowed, gpus({"1"}));
  REQUIRE(outside.warning);
  CHECK_THAT(*outside.warning, Catch::Contains("has none of this agent's CPUs"));
  CHECK(format_cpu_list(outside.cpus[0]) == "0-7");
}

TEST_CASE("cpu-bind applies CPUs and OMP_NUM_THREADS unless the user set it", "[cpubind]") {
  const Topology t = machine(1, 1, 4);
  const CpuBinding b = decide_cpu_binding(CpuBind::cores, t, all_of(t), no_gpus(2));
  std::vector<Worker> ws(2);
  apply_cpu_binding(b, false, ws);
  CHECK(format_cpu_list(ws[1].cpus) == "2-3,6-7");
  CHECK(ws[1].env["OMP_NUM_THREADS"] == "2");
  std::vector<Worker> user(2);
  user[0].env["OMP_NUM_THREADS"] = "7";
  apply_cpu_binding(b, true, user);
  CHECK(user[0].env["OMP_NUM_THREADS"] == "7");
  CHECK(user[0].cpus == ws[0].cpus);
}

TEST_CASE("cpu lists print compactly, as the kernel's Cpus_allowed_list", "[cpubind]") {
  CHECK(format_cpu_list({}).empty());
  CHECK(format_cpu_list({3}) == "3");
  CHECK(format_cpu_list({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11");
}
