#include "agent/topology.hpp"

#include <sched.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <tuple>

#include <fmt/format.h>

#include "agent/error.hpp"
#include "hwloc_lib.hpp"

namespace ddprun::agent {

namespace {

using TopologyPtr = std::unique_ptr<hwloc_topology, decltype(&hwloc_topology_destroy)>;

// Loads a topology; `source` picks where it comes from. With `io` the GPUs' PCI and OS devices are
// kept; without, hwloc's I/O filters stay at "none", so its PCI discovery (the pci plugin and its
// libpciaccess) does not even start: --cpu-bind cores and numa read CPUs and NUMA nodes only.
TopologyPtr load(const std::function<int(hwloc_topology_t)>& source, const std::string& what, bool io) {
  const hwloc::Api& h = hwloc::api();
  hwloc_topology_t t = nullptr;
  if (h.topology_init(&t) != 0) throw Error(fmt::format("hwloc: cannot initialise ({})", what), 1);
  TopologyPtr p(t, h.topology_destroy);
  if (io) h.set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (source(t) != 0 || h.topology_load(t) != 0) {
    throw Error(fmt::format("hwloc cannot read the topology of {}: {}; run with --cpu-bind none", what,
                            std::strerror(errno)),
                1);
  }
  return p;
}

std::vector<int> bits(hwloc_const_bitmap_t set) {
  const hwloc::Api& h = hwloc::api();
  std::vector<int> out;
  for (int i = h.bitmap_first(set); i != -1; i = h.bitmap_next(set, i)) out.push_back(i);
  return out;
}

// Cores in hwloc's logical order (package, NUMA node, core); machines or synthetic topologies that
// report no cores count each hardware thread as one.
std::vector<core::Core> cores_of(hwloc_topology_t t) {
  const hwloc::Api& h = hwloc::api();
  const hwloc_obj_type_t unit = h.nbobjs_by_type(t, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
  std::vector<core::Core> out;
  for (hwloc_obj_t o = h.next_obj_by_type(t, unit, nullptr); o != nullptr;
       o = h.next_obj_by_type(t, unit, o)) {
    if (o->cpuset == nullptr || h.bitmap_iszero(o->cpuset)) continue;
    const int numa = o->nodeset != nullptr ? h.bitmap_first(o->nodeset) : 0;
    out.push_back({bits(o->cpuset), std::max(numa, 0)});
  }
  return out;
}

// The NUMA nodes an I/O object is attached near: those of its first non-I/O ancestor.
std::vector<int> locality(hwloc_obj_t io) {
  hwloc_obj_t a = hwloc::Api::non_io_ancestor(io);
  return a != nullptr && a->nodeset != nullptr ? bits(a->nodeset) : std::vector<int>{};
}

// "nvml3" or "cuda3" -> "3".
std::optional<std::string> index_after(const char* name, const char* prefix) {
  const std::size_t n = std::strlen(prefix);
  if (name == nullptr || std::strncmp(name, prefix, n) != 0 || name[n] == '\0') return std::nullopt;
  for (const char* c = name + n; *c != '\0'; ++c) {
    if (*c < '0' || *c > '9') return std::nullopt;
  }
  return std::string(name + n);
}

// GPUs from the NVML or CUDA OS devices (hwloc's optional plugins): index, and NVML's UUID.
std::map<std::string, std::vector<int>> gpus_from_osdevs(hwloc_topology_t t) {
  const hwloc::Api& h = hwloc::api();
  std::map<std::string, std::vector<int>> out;
  for (const char* prefix : {"nvml", "cuda"}) {
    for (hwloc_obj_t o = h.next_obj_by_type(t, HWLOC_OBJ_OS_DEVICE, nullptr); o != nullptr;
         o = h.next_obj_by_type(t, HWLOC_OBJ_OS_DEVICE, o)) {
      const auto idx = index_after(o->name, prefix);
      if (!idx) continue;
      out.emplace(*idx, locality(o));
      if (const char* uuid = hwloc::Api::info_by_name(o, "NVIDIAUUID")) out.emplace(uuid, locality(o));
    }
    if (!out.empty()) return out;
  }
  return out;
}

// Without those plugins: NVIDIA display/3D controllers in PCI bus order, numbered from 0.
std::map<std::string, std::vector<int>> gpus_from_pci(hwloc_topology_t t) {
  constexpr unsigned kNvidia = 0x10de;
  constexpr unsigned kDisplayClass = 0x03;
  const hwloc::Api& h = hwloc::api();
  std::vector<hwloc_obj_t> devs;
  for (hwloc_obj_t o = h.next_obj_by_type(t, HWLOC_OBJ_PCI_DEVICE, nullptr); o != nullptr;
       o = h.next_obj_by_type(t, HWLOC_OBJ_PCI_DEVICE, o)) {
    const auto& pci = o->attr->pcidev;
    if (pci.vendor_id == kNvidia && (pci.class_id >> 8) == kDisplayClass) devs.push_back(o);
  }
  auto key = [](hwloc_obj_t o) {
    const auto& p = o->attr->pcidev;
    return std::make_tuple(p.domain, p.bus, p.dev, p.func);
  };
  std::sort(devs.begin(), devs.end(), [&](hwloc_obj_t a, hwloc_obj_t b) { return key(a) < key(b); });
  std::map<std::string, std::vector<int>> out;
  for (std::size_t i = 0; i < devs.size(); ++i) out.emplace(std::to_string(i), locality(devs[i]));
  return out;
}

core::Topology to_model(hwloc_topology_t t) {
  core::Topology m;
  m.cores = cores_of(t);
  m.gpu_numa = gpus_from_osdevs(t);
  if (m.gpu_numa.empty()) m.gpu_numa = gpus_from_pci(t);
  return m;
}

}  // namespace

core::Topology read_topology(bool with_gpus) {
  return to_model(load([](hwloc_topology_t) { return 0; }, "this machine", with_gpus).get());
}

core::Topology topology_from_synthetic(const std::string& description) {
  return to_model(load([&](hwloc_topology_t t) { return hwloc::api().set_synthetic(t, description.c_str()); },
                       fmt::format("synthetic '{}'", description), true)
                      .get());
}

core::Topology topology_from_xml(const std::string& xml) {
  return to_model(load(
                      [&](hwloc_topology_t t) {
                        return hwloc::api().set_xmlbuffer(t, xml.c_str(), static_cast<int>(xml.size()) + 1);
                      },
                      "an XML topology", true)
                      .get());
}

std::set<int> own_affinity() {
  // A dynamic set: machines with more CPUs than CPU_SETSIZE exist.
  for (std::size_t n = CPU_SETSIZE;; n *= 2) {
    const std::unique_ptr<cpu_set_t, void (*)(cpu_set_t*)> guard(CPU_ALLOC(n),
                                                                 [](cpu_set_t* s) { CPU_FREE(s); });
    cpu_set_t* set = guard.get();
    const std::size_t size = CPU_ALLOC_SIZE(n);
    if (::sched_getaffinity(0, size, set) == 0) {
      std::set<int> out;
      for (std::size_t i = 0; i < n; ++i) {
        if (CPU_ISSET_S(i, size, set)) out.insert(static_cast<int>(i));
      }
      return out;
    }
    if (errno != EINVAL || n > (std::size_t{1} << 20)) {
      throw Error(fmt::format("cannot read this process's CPU affinity: {}", std::strerror(errno)), 1);
    }
  }
}

std::optional<std::string> bind_workers(core::CpuBind mode, bool user_omp, std::vector<core::Worker>& local) {
  if (mode == core::CpuBind::none || local.empty()) return std::nullopt;  // reads nothing
  return core::bind_local_workers(mode, read_topology(mode == core::CpuBind::gpu), own_affinity(), user_omp,
                                  local);
}

}  // namespace ddprun::agent
