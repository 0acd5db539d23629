// The hwloc reader behind --cpu-bind: synthetic topologies for the CPU side, and XML topologies with
// PCI and OS devices for GPU locality (synthetic descriptions cannot hold I/O devices).
#include <catch2/catch.hpp>

#include <dlfcn.h>
#include <hwloc.h>
#include <sched.h>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "agent/error.hpp"
#include "agent/spawn.hpp"
#include "agent/topology.hpp"
#include "hwloc_lib.hpp"

using namespace ddprun;
using core::CpuBind;
using core::format_cpu_list;

namespace {

std::string mask(int first, int count) {
  return fmt::format("0x{:08x}", ((1U << count) - 1U) << first);
}

// The cpuset and nodeset attributes hwloc's XML import expects on a normal object.
std::string sets(int cpu, int ncpus, int node, int nnodes) {
  return fmt::format(R"(cpuset="{0}" complete_cpuset="{0}" nodeset="{1}" complete_nodeset="{1}")",
                     mask(cpu, ncpus), mask(node, nnodes));
}

// Where a GPU hangs in the generated topology.
struct Gpu {
  int package = 0;
  int numa = -1;              // -1: under the package itself (both its NUMA nodes)
  std::string busid;          // "0000:3b:00.0"
  std::string osdev;          // "nvml0", "cuda0", or "" for a bare PCI device
  std::string uuid;           // NVML's UUID info, or ""
  std::string type = "0302";  // PCI class: 3D controller
  std::string vendor = "10de";
};

std::string gpu_xml(const Gpu& g, int& gp) {
  std::string out = fmt::format(
      R"(<object type="PCIDev" gp_index="{}" pci_busid="{}" pci_type="{} [{}:2330] [{}:16c1] a1" pci_link_speed="0.0">)",
      gp++, g.busid, g.type, g.vendor, g.vendor);
  if (!g.osdev.empty()) {
    out += fmt::format(R"(<object type="OSDev" gp_index="{}" name="{}" osdev_type="1">)", gp++, g.osdev);
    if (!g.uuid.empty()) out += fmt::format(R"(<info name="NVIDIAUUID" value="{}"/>)", g.uuid);
    out += "</object>";
  }
  return out + "</object>";
}

// 2 packages x 2 NUMA nodes x 2 cores x 2 PUs; NUMA node n holds PUs 4n..4n+3, and `gpus`.
std::string machine_xml(const std::vector<Gpu>& gpus) {
  int gp = 1;
  std::string x = R"(<?xml version="1.0" encoding="UTF-8"?><!DOCTYPE topology SYSTEM "hwloc2.dtd">)";
  x += R"(<topology version="2.0">)";
  x += fmt::format(
      R"(<object type="Machine" os_index="0" cpuset="{0}" complete_cpuset="{0}" allowed_cpuset="{0}" )"
      R"(nodeset="{1}" complete_nodeset="{1}" allowed_nodeset="{1}" gp_index="{2}">)",
      mask(0, 16), mask(0, 4), gp++);
  for (int p = 0; p < 2; ++p) {
    x += fmt::format(R"(<object type="Package" os_index="{}" {} gp_index="{}">)", p, sets(8 * p, 8, 2 * p, 2),
                     gp++);
    for (int k = 0; k < 2; ++k) {
      const int n = 2 * p + k;
      x += fmt::format(R"(<object type="Group" {} gp_index="{}">)", sets(4 * n, 4, n, 1), gp++);
      x +=
          fmt::format(R"(<object type="NUMANode" os_index="{}" {} gp_index="{}" local_memory="1073741824"/>)",
                      n, sets(4 * n, 4, n, 1), gp++);
      for (int c = 0; c < 2; ++c) {
        const int core = 2 * n + c;
        x += fmt::format(R"(<object type="Core" os_index="{}" {} gp_index="{}">)", core,
                         sets(2 * core, 2, n, 1), gp++);
        for (int t = 0; t < 2; ++t) {
          x += fmt::format(R"(<object type="PU" os_index="{}" {} gp_index="{}"/>)", 2 * core + t,
                           sets(2 * core + t, 1, n, 1), gp++);
        }
        x += "</object>";
      }
      for (const auto& g : gpus) {
        if (g.package == p && g.numa == n) x += gpu_xml(g, gp);
      }
      x += "</object>";
    }
    for (const auto& g : gpus) {
      if (g.package == p && g.numa < 0) x += gpu_xml(g, gp);
    }
    x += "</object>";
  }
  x += "</object></topology>";
  // hwloc's own minimal XML parser (no libxml2) wants one tag per line, as hwloc writes them.
  std::string lines;
  for (char ch : x) {
    lines += ch;
    if (ch == '>') lines += '\n';
  }
  return lines;
}

std::set<int> all_of(const core::Topology& t) {
  std::set<int> s;
  for (const auto& c : t.cores) s.insert(c.pus.begin(), c.pus.end());
  return s;
}

}  // namespace

TEST_CASE("hwloc synthetic 2 packages x 2 NUMA x 8 cores x 2 PUs reads as 32 cores", "[cpubind][hwloc]") {
  const core::Topology t = agent::topology_from_synthetic("pack:2 numa:2 core:8 pu:2");
  REQUIRE(t.cores.size() == 32);
  CHECK(t.cores[0].pus == std::vector<int>{0, 1});
  CHECK(t.cores[0].numa == 0);
  CHECK(t.cores[8].numa == 1);
  CHECK(t.cores[31].pus == std::vector<int>{62, 63});
  CHECK(t.cores[31].numa == 3);
  CHECK(t.gpu_numa.empty());

  const auto cores = core::decide_cpu_binding(CpuBind::cores, t, all_of(t), {std::nullopt, std::nullopt});
  CHECK(format_cpu_list(cores.cpus[0]) == "0-31");
  CHECK(format_cpu_list(cores.cpus[1]) == "32-63");
  const auto numa =
      core::decide_cpu_binding(CpuBind::numa, t, all_of(t), std::vector<std::optional<std::string>>(4));
  CHECK(format_cpu_list(numa.cpus[3]) == "48-63");
  // No GPU in a synthetic topology: gpu mode says so once and binds as numa.
  const auto gpu = core::decide_cpu_binding(CpuBind::gpu, t, all_of(t), {std::string("0")});
  REQUIRE(gpu.warning);
  CHECK_THAT(*gpu.warning, Catch::Contains("no NUMA locality for GPU 0"));
  CHECK(format_cpu_list(gpu.cpus[0]) == "0-15");
}

TEST_CASE("hwloc synthetic without cores counts each hardware thread as a core", "[cpubind][hwloc]") {
  const core::Topology t = agent::topology_from_synthetic("pack:2 pu:3");
  REQUIRE(t.cores.size() == 6);
  CHECK(t.cores[5].pus == std::vector<int>{5});
}

TEST_CASE("hwloc: a bad synthetic description is an error, not a crash", "[cpubind][hwloc][error]") {
  CHECK_THROWS_AS(agent::topology_from_synthetic("pack:two"), agent::Error);
  CHECK_THROWS_AS(agent::topology_from_xml("<topology"), agent::Error);
}

TEST_CASE("hwloc XML: NVML GPUs by index and UUID, located at their NUMA node", "[cpubind][hwloc]") {
  const core::Topology t = agent::topology_from_xml(machine_xml({
      {0, 0, "0000:1b:00.0", "nvml0", "GPU-aaaa"},
      {0, 1, "0000:3b:00.0", "nvml1", ""},
      {1, 3, "0000:db:00.0", "nvml3", ""},
      {1, 2, "0000:9b:00.0", "nvml2", ""},
  }));
  REQUIRE(t.cores.size() == 8);
  CHECK(t.cores[7].pus == std::vector<int>{14, 15});
  CHECK(t.cores[7].numa == 3);
  CHECK(t.gpu_numa.at("0") == std::vector<int>{0});
  CHECK(t.gpu_numa.at("GPU-aaaa") == std::vector<int>{0});
  CHECK(t.gpu_numa.at("2") == std::vector<int>{2});
  CHECK(t.gpu_numa.at("3") == std::vector<int>{3});

  const auto b = core::decide_cpu_binding(CpuBind::gpu, t, all_of(t),
                                          {std::string("3"), std::string("1"), std::string("GPU-aaaa")});
  CHECK_FALSE(b.warning);
  CHECK(format_cpu_list(b.cpus[0]) == "12-15");
  CHECK(format_cpu_list(b.cpus[1]) == "4-7");
  CHECK(format_cpu_list(b.cpus[2]) == "0-3");
  CHECK(b.threads == std::vector<int>{2, 2, 2});
}

TEST_CASE("hwloc XML: bare NVIDIA PCI devices are numbered in bus order", "[cpubind][hwloc]") {
  // No NVML/CUDA plugin: only PCI devices; other vendors' and non-display devices are not GPUs.
  const core::Topology t = agent::topology_from_xml(machine_xml({
      {1, 3, "0000:db:00.0", "", ""},
      {0, 0, "0000:1b:00.0", "", ""},
      {0, 1, "0000:3b:00.0", "", "", "0200"},          // an NVIDIA network card
      {1, 2, "0000:9b:00.0", "", "", "0302", "1002"},  // another vendor's GPU
      {1, -1, "0000:c0:00.0", "", ""},                 // under the package: both its nodes
  }));
  REQUIRE(t.gpu_numa.size() == 3);
  CHECK(t.gpu_numa.at("0") == std::vector<int>{0});
  CHECK(t.gpu_numa.at("1") == std::vector<int>{2, 3});
  CHECK(t.gpu_numa.at("2") == std::vector<int>{3});
}

TEST_CASE("binding within a restricted affinity on an XML machine with GPUs", "[cpubind][hwloc]") {
  const core::Topology t = agent::topology_from_xml(machine_xml({
      {0, 0, "0000:1b:00.0", "nvml0", ""},
      {1, 3, "0000:db:00.0", "nvml1", ""},
  }));
  const std::set<int> slurm_cgroup = {0, 1, 2, 3, 4, 5};  // NUMA node 0 and half of node 1
  const auto b =
      core::decide_cpu_binding(CpuBind::gpu, t, slurm_cgroup, {std::string("0"), std::string("1")});
  REQUIRE(b.warning);  // GPU 1's node 3 is outside the cgroup
  CHECK_THAT(*b.warning, Catch::Contains("GPU 1 (local rank 1) has none of this agent's CPUs"));
  CHECK(format_cpu_list(b.cpus[0]) == "0-3");
  CHECK(format_cpu_list(b.cpus[1]) == "4-5");
  const auto cores =
      core::decide_cpu_binding(CpuBind::cores, t, slurm_cgroup, std::vector<std::optional<std::string>>(3));
  CHECK(format_cpu_list(cores.cpus[2]) == "4-5");
}

namespace {

// Every hwloc plugin (and so the libraries each pulls in), loaded for the life of this process. hwloc
// loads its plugins at the start of discovery and dlcloses them at the end; what a plugin's library
// keeps in its globals then points nowhere. libpciaccess, which the pci plugin drives, keeps about
// 1 KB in 9 blocks on a machine with a few PCI devices (the count depends on the devices): under ASan,
// LeakSanitizer reports them at exit from an "<unknown module>" (the unloaded one), which no
// suppression in tests/lsan.supp can name. Held here with RTLD_NODELETE, those globals stay reachable,
// so that LeakSanitizer still checks every other allocation, ddprun's own included.
void keep_hwloc_plugins_loaded() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("HWLOC_PLUGINS_PATH")) {
    std::stringstream list(env);
    for (std::string d; std::getline(list, d, ':');) dirs.push_back(d);
  }
  Dl_info lib{};  // hwloc's own plugin directory: <libdir>/hwloc beside the libhwloc.so loaded at run time
  const auto init = agent::hwloc::api().topology_init;
  if (::dladdr(reinterpret_cast<void*>(init), &lib) != 0 && lib.dli_fname != nullptr)
    dirs.push_back((std::filesystem::path(lib.dli_fname).parent_path() / "hwloc").string());
  for (const auto& dir : dirs) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("hwloc_", 0) == 0 && e.path().extension() == ".so")
        ::dlopen(e.path().c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);  // one that cannot load: skipped
    }
  }
}

}  // namespace

TEST_CASE("the live machine: every core is in the topology, the affinity is ours", "[cpubind][hwloc]") {
  keep_hwloc_plugins_loaded();
  const std::set<int> mine = agent::own_affinity();
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(::sched_getaffinity(0, sizeof set, &set) == 0);
  CHECK(static_cast<int>(mine.size()) == CPU_COUNT(&set));
  // As --cpu-bind gpu reads it (PCI and OS devices too), and as cores and numa do (no I/O device).
  for (const bool gpus : {true, false}) {
    INFO("with GPUs: " << gpus);
    const core::Topology t = agent::read_topology(gpus);
    REQUIRE_FALSE(t.cores.empty());
    for (int cpu : mine) CHECK(all_of(t).count(cpu) == 1);
    if (!gpus) CHECK(t.gpu_numa.empty());
  }
}

TEST_CASE("hwloc is loaded at run time, and named: libhwloc.so.15 on this machine", "[cpubind][hwloc]") {
  // scripts/setup.sh installs it; the binary does not link it (docs/install.md, "Optional libraries").
  const auto lib = agent::hwloc_library();
  INFO(lib.error);
  CHECK(lib.found);
  CHECK(lib.name == "libhwloc.so.15");
  CHECK(lib.error.empty());
}

TEST_CASE("a CPU set the kernel refuses is a start error naming the CPUs", "[cpubind][spawn]") {
  agent::SpawnRequest req;
  req.program = "/bin/true";
  req.argv = {"/bin/true"};
  req.cpus = {4000};  // no such CPU: sched_setaffinity says EINVAL
  CHECK_THROWS_WITH(agent::spawn_process(req),
                    Catch::StartsWith("cannot bind the worker to CPUs 4000 (--cpu-bind): Invalid argument"));
}
