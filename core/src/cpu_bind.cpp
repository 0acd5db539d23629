#include "core/cpu_bind.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.hpp"

namespace ddprun::core {

const char* to_string(CpuBind m) {
  return name_of(kCpuBindNames, m, "?");
}

CpuBind parse_cpu_bind(const std::string& v) {
  if (const auto m = value_of(kCpuBindNames, v)) return *m;
  throw Error(fmt::format("--cpu-bind '{}' is not a mode; give none, cores, numa or gpu", v));
}

namespace {

// The cores this agent may use, each cut down to its allowed hardware threads; a core with none
// of them allowed is left out. Never adds a CPU outside `allowed`.
std::vector<Core> allowed_cores(const Topology& topo, const std::set<int>& allowed) {
  std::vector<Core> out;
  for (const auto& c : topo.cores) {
    Core kept{{}, c.numa};
    for (int pu : c.pus) {
      if (allowed.count(pu) != 0) kept.pus.push_back(pu);
    }
    if (!kept.pus.empty()) out.push_back(std::move(kept));
  }
  return out;
}

std::vector<int> pus_of(const std::vector<Core>& cores) {
  std::vector<int> out;
  for (const auto& c : cores) out.insert(out.end(), c.pus.begin(), c.pus.end());
  std::sort(out.begin(), out.end());
  return out;
}

// The allowed cores grouped by NUMA node, nodes in topology order.
std::vector<std::pair<int, std::vector<Core>>> by_numa(const std::vector<Core>& cores) {
  std::vector<std::pair<int, std::vector<Core>>> out;
  for (const auto& c : cores) {
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& g) { return g.first == c.numa; });
    if (it == out.end()) it = out.insert(out.end(), {c.numa, {}});
    it->second.push_back(c);
  }
  return out;
}

// Each worker's cores; OMP threads are the cores shared out among workers bound to the same ones.
CpuBinding finish(const std::vector<std::vector<Core>>& per_worker) {
  CpuBinding b;
  std::map<std::vector<int>, int> sharing;
  for (const auto& cs : per_worker) b.cpus.push_back(pus_of(cs));
  for (const auto& c : b.cpus) ++sharing[c];
  for (std::size_t i = 0; i < per_worker.size(); ++i) {
    const int n = static_cast<int>(per_worker[i].size());
    b.threads.push_back(std::max(1, n / sharing[b.cpus[i]]));
  }
  return b;
}

CpuBinding bind_cores(const std::vector<Core>& cores, std::size_t workers) {
  if (workers > cores.size()) {
    throw Error(fmt::format(
        "--cpu-bind cores: {} workers but only {} core{} available to this agent; run at most {} "
        "worker{} per node, or use --cpu-bind numa or none",
        workers, cores.size(), cores.size() == 1 ? "" : "s", cores.size(), cores.size() == 1 ? "" : "s"));
  }
  // Equal shares: the cores % workers left over stay unused rather than making one worker bigger.
  const std::size_t share = cores.size() / workers;
  std::vector<std::vector<Core>> per;
  for (std::size_t i = 0; i < workers; ++i) {
    const auto first = cores.begin() + static_cast<std::ptrdiff_t>(i * share);
    per.emplace_back(first, first + static_cast<std::ptrdiff_t>(share));
  }
  return finish(per);
}

// Block distribution: worker i goes to node i * nodes / workers, so consecutive local ranks (which
// usually hold consecutive GPUs) share a node, and fewer workers than nodes are spread out.
CpuBinding bind_numa(const std::vector<Core>& cores, std::size_t workers) {
  const auto groups = by_numa(cores);
  std::vector<std::vector<Core>> per;
  for (std::size_t i = 0; i < workers; ++i) per.push_back(groups[i * groups.size() / workers].second);
  return finish(per);
}

// The allowed cores of the NUMA node(s) nearest worker i's first GPU, or why they are not known.
std::optional<std::vector<Core>> gpu_cores(const std::vector<Core>& cores, const Topology& topo,
                                           const std::optional<std::string>& gpu, std::size_t i,
                                           std::string& why) {
  if (!gpu) {
    why = fmt::format("local rank {} has no GPU", i);
    return std::nullopt;
  }
  const auto it = topo.gpu_numa.find(*gpu);
  if (it == topo.gpu_numa.end() || it->second.empty()) {
    why = fmt::format("hwloc knows no NUMA locality for GPU {} (local rank {})", *gpu, i);
    return std::nullopt;
  }
  std::vector<Core> out;
  for (const auto& c : cores) {
    if (std::find(it->second.begin(), it->second.end(), c.numa) != it->second.end()) out.push_back(c);
  }
  if (out.empty()) {
    why = fmt::format("the NUMA node of GPU {} (local rank {}) has none of this agent's CPUs", *gpu, i);
    return std::nullopt;
  }
  return out;
}

}  // namespace

CpuBinding decide_cpu_binding(CpuBind mode, const Topology& topo, const std::set<int>& allowed,
                              const std::vector<std::optional<std::string>>& first_gpus) {
  const std::size_t workers = first_gpus.size();
  if (mode == CpuBind::none || workers == 0) return {};
  const std::vector<Core> cores = allowed_cores(topo, allowed);
  if (cores.empty()) {
    throw Error(
        fmt::format("--cpu-bind {}: none of the CPUs this agent may use appear in the machine's "
                    "topology; run with --cpu-bind none",
                    to_string(mode)));
  }
  if (mode == CpuBind::cores) return bind_cores(cores, workers);
  if (mode == CpuBind::numa) return bind_numa(cores, workers);
  std::vector<std::vector<Core>> per;
  std::string why;
  for (std::size_t i = 0; i < workers; ++i) {
    auto cs = gpu_cores(cores, topo, first_gpus[i], i, why);
    if (!cs) {
      CpuBinding b = bind_numa(cores, workers);
      b.warning = fmt::format("--cpu-bind gpu: {}; binding by NUMA node instead, as --cpu-bind numa", why);
      return b;
    }
    per.push_back(std::move(*cs));
  }
  return finish(per);
}

void apply_cpu_binding(const CpuBinding& b, bool user_omp, std::vector<Worker>& local) {
  if (b.cpus.empty()) return;
  for (std::size_t i = 0; i < local.size() && i < b.cpus.size(); ++i) {
    local[i].cpus = b.cpus[i];
    if (!user_omp) local[i].env["OMP_NUM_THREADS"] = std::to_string(b.threads[i]);
  }
}

std::optional<std::string> bind_local_workers(CpuBind mode, const Topology& topo,
                                              const std::set<int>& allowed, bool user_omp,
                                              std::vector<Worker>& local) {
  if (mode == CpuBind::none || local.empty()) return std::nullopt;
  std::vector<std::optional<std::string>> first_gpus;
  first_gpus.reserve(local.size());
  for (const auto& w : local) {
    first_gpus.push_back(w.gpus.empty() ? std::nullopt : std::optional<std::string>(w.gpus.front()));
  }
  const CpuBinding b = decide_cpu_binding(mode, topo, allowed, first_gpus);
  apply_cpu_binding(b, user_omp, local);
  return b.warning;
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i + 1;  // cpus[i..j) is a run of consecutive numbers
    while (j < cpus.size() && cpus[j] == cpus[j - 1] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j - i == 1 ? std::to_string(cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j - 1]);
    i = j;
  }
  return out;
}

}  // namespace ddprun::core
