#include "launcher/self_launch.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include <fmt/format.h>

#include "agent/command.hpp"
#include "agent/io.hpp"
#include "agent/policy.hpp"
#include "agent/signals.hpp"
#include "core/error.hpp"
#include "core/hostlist.hpp"
#include "launcher/auth_setup.hpp"
#include "launcher/system.hpp"
#include "requeue.hpp"
#include "store/auth.hpp"

extern char** environ;

namespace ddprun::launcher {

GpuRequest self_launch_gpus(const core::EnvSnapshot& env) {
  GpuRequest g;
  const auto per_task = env.find("SLURM_GPUS_PER_TASK");
  if (per_task == env.end() || per_task->second.empty()) return g;
  int gpus = 0;
  std::vector<int> tasks;
  try {
    gpus = core::parse_int("SLURM_GPUS_PER_TASK", per_task->second, 1);
    const auto it = env.find("SLURM_TASKS_PER_NODE");
    if (it != env.end()) tasks = core::parse_count_list(it->second);
  } catch (const core::Error&) {
    g.warning = fmt::format(
        "SLURM_GPUS_PER_TASK='{}' is not a GPU count; the agents may see fewer GPUs than the "
        "job holds",
        per_task->second);
    return g;
  }
  if (tasks.empty() || std::adjacent_find(tasks.begin(), tasks.end(), std::not_equal_to<>()) != tasks.end()) {
    g.warning =
        "the job asked --gpus-per-task with different task counts per node; each node's agent gets "
        "one task's GPUs. Ask --gpus-per-node instead, or run srun ddprun yourself";
    return g;
  }
  g.per_node = gpus * tasks.front();
  return g;
}

std::vector<std::string> self_launch_argv(const std::string& srun, int nnodes,
                                          const std::vector<std::string>& self_argv,
                                          std::optional<int> gpus_per_node, bool elastic,
                                          int het_components) {
  // A heterogeneous job: srun alone would run on component 0 (its default), and --nodes would count per
  // component; every node of every component, one task each.
  std::vector<std::string> out =
      het_components >= 2
          ? std::vector<std::string>{srun, fmt::format("--het-group=0-{}", het_components - 1),
                                     "--ntasks-per-node=1"}
          : std::vector<std::string>{srun, fmt::format("--nodes={}", nnodes),
                                     fmt::format("--ntasks={}", nnodes), "--ntasks-per-node=1"};
  if (elastic) {
    // The survivors go on without a lost node: Slurm must keep the step when a node fails (--no-kill) or
    // an agent dies (=0 also beats a site's KillOnBadExit=1).
    out.insert(out.end(), {"--no-kill", "--kill-on-bad-exit=0"});
  } else {
    out.emplace_back("--kill-on-bad-exit=1");
  }
  // The agent spawns all of the node's workers: its step needs all of the job's CPUs and GPUs on the
  // node, not one task's share.
  out.emplace_back("--whole");
  if (gpus_per_node) out.push_back(fmt::format("--gpus-per-node={}", *gpus_per_node));
  out.insert(out.end(), self_argv.begin(), self_argv.end());
  return out;
}

std::optional<std::string> pty_step_hint(const core::EnvSnapshot& env, const core::Resolved& r) {
  const auto pty = env.find("SLURM_PTY_PORT");
  if (pty == env.end() || pty->second.empty() || r.context != core::SlurmContext::step || r.nagents < 2)
    return std::nullopt;
  return fmt::format(
      "this is an interactive srun --pty step over {} nodes: a shell in it ran on every node, but only this "
      "one has the terminal and the others ended at once, so no agent comes from them. Stop this ddprun "
      "(Ctrl-C) and start one agent per node from this shell: srun --overlap --ntasks-per-node=1 ddprun ...; "
      "or run ddprun in an salloc shell instead",
      r.nagents);
}

int elastic_exit_code(int srun_code, std::optional<int> local_agent_code) {
  return local_agent_code.value_or(srun_code);
}

void record_self_launch_result(int code) {
  const char* path = std::getenv(kSelfLaunchResultVar);
  const char* host = std::getenv(kSelfLaunchHostVar);
  if (path == nullptr || host == nullptr || agent::local_hostname() != host) return;
  // Written whole, then renamed: the self-launching ddprun never reads half a number.
  const std::string tmp = fmt::format("{}.{}", path, ::getpid());
  {
    std::ofstream out(tmp);
    out << code << '\n';
    if (!out) return;
  }
  std::rename(tmp.c_str(), path);
}

namespace {

volatile std::sig_atomic_t g_srun_pid = 0;
constexpr int kPassedOn[] = {SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

void pass_on(int sig) {
  if (g_srun_pid > 0) ::kill(static_cast<pid_t>(g_srun_pid), sig);
}

std::string srun_error(int err) {
  return fmt::format(
      "cannot run srun to start ddprun on the allocation's nodes: {}; is Slurm's srun on PATH?",
      std::strerror(err));
}

// srun as a child of this process; its exit code as a shell gives it (128+S for a signal). Between fork
// and exec only async-signal-safe calls: an exec error comes back through a close-on-exec pipe.
int run_srun(std::vector<char*>& cargv) {
  const char* path_env = std::getenv("PATH");
  const auto program = agent::find_in_path(cargv[0], path_env != nullptr ? path_env : "/usr/bin:/bin");
  if (!program) throw core::Error(srun_error(ENOENT), 1);
  int sync[2];
  if (::pipe2(sync, O_CLOEXEC) != 0) throw core::Error(srun_error(errno), 1);
  agent::AllSignalsBlocked blocked;  // no signal between fork and knowing srun's pid
  struct sigaction sa {};
  sa.sa_handler = pass_on;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (const int sig : kPassedOn) sigaction(sig, &sa, nullptr);
  std::signal(SIGINT, SIG_IGN);  // srun, in the same process group, gets Ctrl-C from the terminal itself
  const pid_t pid = ::fork();
  if (pid == 0) {
    for (const int sig : kPassedOn) std::signal(sig, SIG_DFL);
    std::signal(SIGINT, SIG_DFL);
    sigprocmask(SIG_SETMASK, &blocked.old(), nullptr);
    ::execve(program->c_str(), cargv.data(), environ);
    const int err = errno;
    [[maybe_unused]] const ssize_t w = ::write(sync[1], &err, sizeof err);
    ::_exit(127);
  }
  const int fork_errno = errno;
  ::close(sync[1]);
  if (pid < 0) {
    ::close(sync[0]);
    throw core::Error(fmt::format("cannot start srun: {}", std::strerror(fork_errno)), 1);
  }
  g_srun_pid = pid;
  blocked.restore();
  int err = 0;
  ssize_t n = 0;
  while ((n = ::read(sync[0], &err, sizeof err)) < 0 && errno == EINTR) {
  }
  ::close(sync[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (n == static_cast<ssize_t>(sizeof err)) throw core::Error(srun_error(err), 1);
  return agent::decode_wait_status(status).exit_code;
}

// Elastic mode: srun as a child, then the job's code from the agent on this host.
int run_elastic(std::vector<char*>& cargv) {
  std::error_code ec;
  std::string dir = (std::filesystem::temp_directory_path(ec) / "ddprun-self-launch.XXXXXX").string();
  if (ec || ::mkdtemp(dir.data()) == nullptr) {
    throw core::Error(
        fmt::format("cannot make a temporary directory for srun's result: {}", std::strerror(errno)), 1);
  }
  const std::string result = dir + "/exit_code";
  ::setenv(kSelfLaunchResultVar, result.c_str(), 1);
  ::setenv(kSelfLaunchHostVar, agent::local_hostname().c_str(), 1);
  int srun_code = 1;
  try {
    srun_code = run_srun(cargv);
  } catch (...) {
    std::filesystem::remove_all(dir, ec);
    throw;
  }
  std::optional<int> agent_code;
  int code = 0;
  if (std::ifstream in(result); in >> code) agent_code = code;
  std::filesystem::remove_all(dir, ec);
  return elastic_exit_code(srun_code, agent_code);
}

}  // namespace

void exec_self_launch(const core::Resolved& r, int argc, const char* const* argv) {
  std::error_code ec;
  std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) self = argv[0];
  std::vector<std::string> self_argv = {self};
  for (int i = 1; i < argc; ++i) self_argv.emplace_back(argv[i]);
  const std::string srun = "srun";
  // A heterogeneous job's SLURM_GPUS_PER_TASK and tasks per node are component 0's: not asked for.
  const GpuRequest gpus = r.het_components >= 2 ? GpuRequest{} : self_launch_gpus(snapshot_environ());
  if (!gpus.warning.empty()) fmt::print(stderr, "ddprun: warning: {}\n", gpus.warning);
  // srun reads SLURM_GPUS_PER_TASK as --gpus-per-task: one task per node would get one task's GPUs.
  if (gpus.per_node) ::unsetenv("SLURM_GPUS_PER_TASK");
  auto args = self_launch_argv(srun, static_cast<int>(r.allocation_hosts.size()), self_argv, gpus.per_node,
                               r.elastic, r.het_components);
  std::vector<char*> cargv;
  cargv.reserve(args.size() + 1);
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  // The step's own variables must describe the step, not the batch shell.
  ::unsetenv("SLURM_CPU_BIND");
  // Without MUNGE the agents still authenticate: a per-job secret, in srun's environment only (each agent
  // takes it out of its own before any worker starts).
  const auto env = snapshot_environ();
  const char* token = std::getenv("DDPRUN_TOKEN");
  const bool have_token = (token != nullptr && *token != '\0') || r.rdzv_token_file.has_value();
  if (self_launch_needs_token(r.rdzv_auth, have_token, store::auth::munge_usable(munge_socket(env)))) {
    // The agents check that token with HMAC-SHA256: without libcrypto, say so here, before srun starts them.
    if (const auto crypto = store::auth::crypto_library(); !crypto.found) {
      throw core::Error(
          fmt::format("--rdzv-auth auto found no MUNGE, so the agents would share a per-job token: {}, or "
                      "pass --rdzv-auth none to run unauthenticated",
                      crypto.error));
    }
    ::setenv("DDPRUN_TOKEN", store::auth::random_token().c_str(), 1);
  }
  // The step plans with the job id, as this batch context did (its dry run shows the run's run id and ports).
  const auto job = env.find("SLURM_JOB_ID") != env.end() ? env.find("SLURM_JOB_ID") : env.find("SLURM_JOBID");
  if (job != env.end()) ::setenv(core::kSelfLaunchJobVar, job->second.c_str(), 1);
  // The job's code is needed here (elastic: the local agent's; --requeue-on: to requeue on it): srun
  // runs as a child. Otherwise srun replaces this process.
  if (r.elastic || !r.requeue_on.empty())
    std::exit(requeue_if_asked(r, r.elastic ? run_elastic(cargv) : run_srun(cargv)));
  ::execvp(cargv[0], cargv.data());
  throw core::Error(srun_error(errno), 1);
}

}  // namespace ddprun::launcher
