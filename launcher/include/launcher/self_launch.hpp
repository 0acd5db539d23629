#pragma once
// Self-launch: plain `ddprun ...` in a batch script or salloc shell re-runs itself on every node of
// the allocation as one srun step with one task per node.
#include <optional>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/slurm_env.hpp"

namespace ddprun::launcher {

// GPUs the job asked for per task (sbatch --gpus-per-task). The one agent task per node must hold
// the GPUs of all of the node's tasks, or it would see one task's share. Pure.
struct GpuRequest {
  std::optional<int> per_node;  // what the self-launch step asks for per node (--gpus-per-node)
  std::string warning;          // non-empty when it cannot be said (tasks per node differ)
};
GpuRequest self_launch_gpus(const core::EnvSnapshot& env);

// The srun command line that re-launches `self_argv` (ddprun's own argv, argv[0] resolved) on `nnodes`.
// Fail-fast: --kill-on-bad-exit=1, so Slurm ends the step once one agent fails. `elastic` (issue 14):
// --no-kill and --kill-on-bad-exit=0, so the step outlives a lost node or agent and the survivors go on.
// `het_components` >= 2 (a heterogeneous job): one step over every component, --het-group=0-(K-1),
// one agent on each node of each.
std::vector<std::string> self_launch_argv(const std::string& srun, int nnodes,
                                          const std::vector<std::string>& self_argv,
                                          std::optional<int> gpus_per_node = std::nullopt,
                                          bool elastic = false, int het_components = 0);

// Elastic self-launch (issue 14): srun exits with the highest of its tasks' codes, so a lost node's agent
// (137, killed) would fail a job that the others finished. ddprun therefore stays srun's parent, and
// ends with the code of the agent on its own host (the batch host), which has the job's outcome like
// every surviving agent; with srun's own code when that agent left none (it was lost itself, or failed
// before the end). Pure.
int elastic_exit_code(int srun_code, std::optional<int> local_agent_code);

// Agent side: where ddprun asks its local agent for the job's exit code (the variables below, set only
// by an elastic self-launch). Writes `code` when this agent runs on the self-launching host; does
// nothing otherwise, and never fails the job.
inline constexpr const char* kSelfLaunchResultVar = "DDPRUN_SELF_LAUNCH_RESULT";
inline constexpr const char* kSelfLaunchHostVar = "DDPRUN_SELF_LAUNCH_HOST";
void record_self_launch_result(int code);

// An interactive `srun --pty` step over several nodes (SLURM_PTY_PORT): a shell there runs on every node,
// but only node 0's has the terminal, and the others' end at once; ddprun typed into it waits for agents
// that never come. The hint the rendezvous adds to its first "waiting" line there; nullopt elsewhere. Pure.
std::optional<std::string> pty_step_hint(const core::EnvSnapshot& env, const core::Resolved& r);

// Fail-fast: replaces this process with srun (so signals and the exit code pass straight through).
// With --requeue-on, srun runs as a child and requeue_if_asked (launcher/src/requeue.hpp) decides on its
// code. Elastic: runs srun as a child, passes on TERM, HUP, QUIT, USR1 and USR2 (Ctrl-C reaches srun from the
// terminal itself), and exits with elastic_exit_code. Returns only on failure, with an Error.
[[noreturn]] void exec_self_launch(const core::Resolved& r, int argc, const char* const* argv);

}  // namespace ddprun::launcher
