#pragma once
// CPU/NUMA binding (--cpu-bind): a plain model of one node's topology and the pure decision of which
// CPUs each local worker may run on. The agent reads the model from hwloc (agent/topology.hpp) and
// applies the decision with sched_setaffinity in the child; nothing here touches the machine.
#include <array>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/enum_names.hpp"
#include "core/plan.hpp"

namespace ddprun::core {

enum class CpuBind {
  none,   // no binding: the workers inherit the agent's affinity (torchrun's default)
  cores,  // each worker gets a disjoint, equal, contiguous share of the allowed cores
  numa,   // workers spread over NUMA nodes in blocks; each is bound to its node's allowed cores
  gpu,    // each worker is bound to the NUMA node(s) nearest its first GPU; else as numa
};
inline constexpr std::array<EnumName<CpuBind>, 4> kCpuBindNames{
    {{CpuBind::none, "none"}, {CpuBind::cores, "cores"}, {CpuBind::numa, "numa"}, {CpuBind::gpu, "gpu"}}};
const char* to_string(CpuBind m);
// "none" | "cores" | "numa" | "gpu"; throws Error naming --cpu-bind otherwise.
CpuBind parse_cpu_bind(const std::string& v);

// One physical core: its hardware threads (OS CPU numbers, as sched_setaffinity counts them) and the
// NUMA node they belong to.
struct Core {
  std::vector<int> pus;
  int numa = 0;
};

// One node as binding sees it. Cores are in topology order (package, NUMA node, core), so a run of
// consecutive cores is close together.
struct Topology {
  std::vector<Core> cores;
  // GPU id as CUDA_VISIBLE_DEVICES or Slurm give it ("0", or an NVML UUID) -> the NUMA node(s) the
  // GPU hangs under. Missing when the machine does not say.
  std::map<std::string, std::vector<int>> gpu_numa;
};

struct CpuBinding {
  // Per local worker, the CPUs it may run on (sorted); empty for mode none.
  std::vector<std::vector<int>> cpus;
  // Per local worker, its OMP_NUM_THREADS: the whole cores bound, shared out among the workers bound
  // to the same cores (numa and gpu modes can put several workers on one node).
  std::vector<int> threads;
  std::optional<std::string> warning;  // one line, e.g. gpu mode falling back to numa
};

// Which CPUs each of `first_gpus.size()` local workers gets. `allowed` is the agent's own affinity
// (a Slurm cgroup, taskset): only its CPUs are ever handed out. `first_gpus[i]` is worker i's first
// CUDA_VISIBLE_DEVICES entry, if any. Throws Error when the request cannot be met (more workers than
// cores in cores mode, no allowed CPU at all).
CpuBinding decide_cpu_binding(CpuBind mode, const Topology& topo, const std::set<int>& allowed,
                              const std::vector<std::optional<std::string>>& first_gpus);

// Writes the decision into the workers: Worker::cpus, and OMP_NUM_THREADS as the cores bound unless
// `user_omp` (the user set OMP_NUM_THREADS). A binding without CPUs (mode none) changes nothing.
void apply_cpu_binding(const CpuBinding& b, bool user_omp, std::vector<Worker>& local);

// Both steps for one node's workers (in local-rank order): their first GPUs, the decision, applied.
// Returns the decision's warning, if any.
std::optional<std::string> bind_local_workers(CpuBind mode, const Topology& topo,
                                              const std::set<int>& allowed, bool user_omp,
                                              std::vector<Worker>& local);

// "0-3,8,10-11": the compact form of a CPU list, as in /proc/self/status Cpus_allowed_list.
std::string format_cpu_list(const std::vector<int>& cpus);

}  // namespace ddprun::core
