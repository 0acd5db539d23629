#pragma once
// The machine's topology for --cpu-bind, read with hwloc (the library Open MPI and Slurm use) into
// the plain core::Topology model, and the agent's own affinity. Thin: every decision is in
// core/cpu_bind.hpp. No hwloc type leaks out of this header.
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/cpu_bind.hpp"
#include "core/plan.hpp"

namespace ddprun::agent {

// This machine. With `with_gpus` (only --cpu-bind gpu needs them), its NVIDIA GPUs too, keyed by their
// NVML/CUDA index (and NVML UUID) when hwloc has those OS devices, else by their order on the PCI bus,
// which is how nvidia-smi and Slurm number them; without, hwloc reads no I/O device at all (no PCI
// scan). Throws Error when hwloc cannot load the topology,
// or is missing (exit 2, hwloc_library()'s line).
core::Topology read_topology(bool with_gpus);
// The same from a synthetic description ("pack:2 numa:2 core:8 pu:2") or an exported XML topology;
// for tests, and for looking at another machine's topology.
core::Topology topology_from_synthetic(const std::string& description);
core::Topology topology_from_xml(const std::string& xml);

// libhwloc.so.15 (hwloc 2.x), loaded at run time on first use (agent/src/hwloc_lib.hpp), or DDPRUN_LIBHWLOC's
// file or soname when set: what --cpu-bind and the functions above need, and what `ddprun --version` shows.
struct HwlocLibrary {
  std::string name;  // what was loaded; when nothing was, what was tried
  bool found = false;
  std::string error;  // when not found: a one-line message naming the library and what to do
};
HwlocLibrary hwloc_library();

// The CPUs this process may run on (sched_getaffinity): Slurm's cgroup or a taskset, inherited.
std::set<int> own_affinity();

// Binds this node's workers for `mode` on this machine: reads the topology and the agent's
// affinity, decides (core::decide_cpu_binding) and writes Worker::cpus and OMP_NUM_THREADS. Mode
// none changes nothing and reads nothing. Returns the decision's warning, if any; throws core::Error
// for an impossible request.
std::optional<std::string> bind_workers(core::CpuBind mode, bool user_omp, std::vector<core::Worker>& local);

}  // namespace ddprun::agent
