#include "core/plan.hpp"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace ddprun::core {

const char* to_string(Mode m) {
  return name_of(kModeNames, m, "?");
}

int resolve_nproc(const std::optional<std::string>& nproc, const std::vector<std::string>& gpus,
                  int gpus_per_proc, int cpu_count) {
  const int g = gpus_per_proc > 0 ? gpus_per_proc : 1;
  const int ngpus = static_cast<int>(gpus.size());
  auto per_gpu = [&]() {
    if (ngpus == 0) {
      throw Error(
          "--nproc-per-node gpu: no GPUs are visible (CUDA_VISIBLE_DEVICES, SLURM_STEP_GPUS and "
          "SLURM_JOB_GPUS are unset or empty); ask Slurm for GPUs or give a number");
    }
    if (ngpus % g != 0) {
      throw Error(
          fmt::format("{} visible GPUs ({}) are not divisible by --gpus-per-proc {}; "
                      "choose a G that divides the GPU count",
                      ngpus, fmt::join(gpus, ","), g));
    }
    return ngpus / g;
  };
  if (!nproc) {
    // Not given: one worker per GPU group when GPUs are visible, else one (torchrun's default).
    return ngpus > 0 && ngpus % g == 0 ? ngpus / g : 1;
  }
  const std::string& v = *nproc;
  if (v == "gpu") return per_gpu();
  if (v == "cpu") return std::max(1, cpu_count);
  if (v == "auto") return ngpus > 0 ? per_gpu() : std::max(1, cpu_count);
  int n = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (v.empty() || ec != std::errc() || ptr != v.data() + v.size()) {
    throw Error(fmt::format("--nproc-per-node '{}' is not valid; give a number, gpu, cpu or auto", v));
  }
  if (n < 1) throw Error(fmt::format("--nproc-per-node {} must be at least 1", v));
  return n;
}

}  // namespace ddprun::core
