#include "launcher/self_launch.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

namespace ddprun::launcher {

std::vector<std::string> self_launch_argv(const std::string& srun, int nnodes,
                                          const std::vector<std::string>& self_argv) {
  std::vector<std::string> out = {srun, fmt::format("--nodes={}", nnodes), fmt::format("--ntasks={}", nnodes),
                                  "--ntasks-per-node=1", "--kill-on-bad-exit=1",
                                  // The agent spawns all of the node's workers: its step needs all of the
                                  // job's CPUs and GPUs on the node, not one task's share.
                                  "--whole"};
  out.insert(out.end(), self_argv.begin(), self_argv.end());
  return out;
}

void exec_self_launch(const core::Resolved& r, int argc, const char* const* argv) {
  std::error_code ec;
  std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) self = argv[0];
  std::vector<std::string> self_argv = {self};
  for (int i = 1; i < argc; ++i) self_argv.emplace_back(argv[i]);
  const std::string srun = "srun";
  auto args = self_launch_argv(srun, static_cast<int>(r.allocation_hosts.size()), self_argv);
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  // The step's own variables must describe the step, not the batch shell.
  ::unsetenv("SLURM_CPU_BIND");
  ::execvp(cargv[0], cargv.data());
  throw core::Error(
      fmt::format("cannot run srun to start ddprun on the allocation's nodes: {}; is Slurm's srun on PATH?",
                  std::strerror(errno)),
      1);
}

}  // namespace ddprun::launcher
