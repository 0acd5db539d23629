#include "agent/spawn.hpp"

#include <fcntl.h>
#include <linux/close_range.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "agent/error.hpp"
#include "agent/signals.hpp"
#include "exit_watch.hpp"

extern char** environ;

namespace ddprun::agent {

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) reset(o.release());
  return *this;
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::vector<std::string> merge_environment(const std::vector<std::string>& base,
                                           const std::map<std::string, std::string>& overlay) {
  std::map<std::string, std::string> merged;
  for (const auto& kv : base) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    merged.emplace(kv.substr(0, eq), kv.substr(eq + 1));  // first definition wins, like getenv
  }
  for (const auto& [k, v] : overlay) merged[k] = v;
  std::vector<std::string> out;
  out.reserve(merged.size());
  for (const auto& [k, v] : merged) out.push_back(k + "=" + v);
  return out;
}

std::vector<std::string> current_environment() {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) out.emplace_back(*e);
  return out;
}

std::pair<std::string, int> describe_exec_error(int err, const std::string& program) {
  switch (err) {
    case ENOENT:
      if (::access(program.c_str(), F_OK) == 0) {
        return {"interpreter named in the #! line of " + program + " not found", 127};
      }
      return {"no such file: " + program, 127};
    case ENOTDIR:
      return {"no such file: " + program + " (a path component is not a directory)", 127};
    case EACCES:
      return {"permission denied: " + program, 126};
    case ENOEXEC:
      return {"not an executable format: " + program + " (add a #! line or run it via its interpreter)", 126};
    default:
      return {"cannot execute " + program + ": " + std::strerror(err), 126};
  }
}

namespace {

// What the child reports through the sync pipe when it cannot exec.
struct ChildError {
  int stage;  // 0 = exec, 1 = fd setup, 2 = CPU binding
  int err;
};

// A CPU set for sched_setaffinity, built in the agent (the child must not allocate).
struct CpuMask {
  std::unique_ptr<cpu_set_t, void (*)(cpu_set_t*)> set{nullptr, [](cpu_set_t* s) { CPU_FREE(s); }};
  std::size_t size = 0;
};

CpuMask cpu_mask(const std::vector<int>& cpus) {
  CpuMask m;
  if (cpus.empty()) return m;
  const auto n = static_cast<std::size_t>(*std::max_element(cpus.begin(), cpus.end())) + 1;
  m.set.reset(CPU_ALLOC(n));
  m.size = CPU_ALLOC_SIZE(n);
  CPU_ZERO_S(m.size, m.set.get());
  for (int c : cpus) CPU_SET_S(static_cast<std::size_t>(c), m.size, m.set.get());
  return m;
}

// The open-file limits ddprun started with, read before main: the rendezvous store raises the soft
// limit for its sockets (store/src/limits.cpp), and workers must get the limits the user set.
const rlimit kInitialNofile = [] {
  rlimit rl{RLIM_INFINITY, RLIM_INFINITY};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  return rl;
}();

// The child's fixed inputs, prepared before fork.
struct ChildSetup {
  pid_t parent;
  int devnull, out_w, err_w, sync_w;
  int fd_bound;  // descriptors below it are marked close-on-exec when close_range cannot (fd_bound())
  const CpuMask* cpus;
  const sigset_t* ignored;  // signals kept ignored across exec
};

[[noreturn]] void child_fail(int sync_fd, int stage) {
  const ChildError e{stage, errno};
  [[maybe_unused]] const ssize_t w = ::write(sync_fd, &e, sizeof e);
  ::_exit(127);
}

// Runs between fork and exec: only async-signal-safe calls, no allocation (the agent may have
// other threads, whose locks are frozen in the child).
[[noreturn]] void child_main(const ChildSetup& c, const char* program, char* const* argv, char* const* envp) {
  const int sync_w = c.sync_w;
  ::setpgid(0, 0);  // own group: teardown and forwarded signals reach the worker's children too
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != c.parent) ::raise(SIGKILL);  // the agent died before prctl took effect

  // Handlers point into the agent's code; ignored signals would be inherited by exec.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  struct sigaction ign = dfl;
  ign.sa_handler = SIG_IGN;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP)
      ::sigaction(sig, sigismember(c.ignored, sig) == 1 ? &ign : &dfl, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);  // the agent blocked everything around fork

  if (::dup2(c.devnull, 0) < 0 || ::dup2(c.out_w, 1) < 0 || ::dup2(c.err_w, 2) < 0) child_fail(sync_w, 1);
  // Before exec, so the program and everything it starts inherit the binding from the first instruction.
  if (c.cpus->size != 0 && ::sched_setaffinity(0, c.cpus->size, c.cpus->set.get()) != 0)
    child_fail(sync_w, 2);
  // Every other descriptor closes at exec (the sync pipe must survive until then). close_range is
  // Linux 5.9 and its CLOEXEC flag 5.11 (ENOSYS, then EINVAL before): then one fcntl a descriptor.
  if (::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    for (int fd = 3; fd < c.fd_bound; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  if (kInitialNofile.rlim_cur != RLIM_INFINITY) {
    rlimit rl{};
    if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur > kInitialNofile.rlim_cur) {
      rl.rlim_cur = kInitialNofile.rlim_cur;  // lowering the soft limit always succeeds
      ::setrlimit(RLIMIT_NOFILE, &rl);
    }
  }
  ::execve(program, argv, envp);
  child_fail(sync_w, 0);
}

// The descriptors the fallback loop covers: those below the soft RLIMIT_NOFILE (every open one, unless the
// limit was lowered since), at most 65536 calls. Read before fork.
int fd_bound() {
  rlimit rl{};
  return ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 65536 ? static_cast<int>(rl.rlim_cur) : 65536;
}

UniqueFd open_checked(const char* path, int flags) {
  const int fd = ::open(path, flags | O_CLOEXEC);
  if (fd < 0) throw Error(std::string("cannot open ") + path + ": " + std::strerror(errno), 1);
  return UniqueFd(fd);
}

std::pair<UniqueFd, UniqueFd> make_pipe() {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    throw Error(std::string("cannot create a pipe: ") + std::strerror(errno) +
                    " (too many open files? raise ulimit -n)",
                1);
  }
  return {UniqueFd(p[0]), UniqueFd(p[1])};
}

// If the agent was started with stdio closed, new pipes could land on 0-2 and be clobbered by the
// child's dup2; occupy those slots with /dev/null first.
void ensure_stdio_open() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
      const int n = ::open("/dev/null", O_RDWR);
      if (n >= 0 && n != fd) ::close(n);  // open() returns the lowest free slot, i.e. fd
    }
  }
}

// The sync pipe closes at exec (close-on-exec), or carries the child's error: then it is reaped and
// the error thrown.
void wait_for_exec(const UniqueFd& sync_r, pid_t pid, const SpawnRequest& req) {
  const std::string& program = req.program;
  ChildError ce{};
  ssize_t n;
  do {
    n = ::read(sync_r.get(), &ce, sizeof ce);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (ce.stage == 0) {
    auto [msg, code] = describe_exec_error(ce.err, program);
    throw Error(msg, code);
  }
  if (ce.stage == 2) {
    throw Error(fmt::format("cannot bind the worker to CPUs {} (--cpu-bind): {}", fmt::join(req.cpus, ","),
                            std::strerror(ce.err)),
                1);
  }
  throw Error(std::string("cannot set up the worker's stdio: ") + std::strerror(ce.err), 1);
}

}  // namespace

Spawned spawn_process(const SpawnRequest& req) {
  ensure_stdio_open();
  std::vector<char*> argv;
  for (const auto& a : req.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : req.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  UniqueFd devnull = open_checked("/dev/null", O_RDONLY);
  auto [out_r, out_w] = make_pipe();
  auto [err_r, err_w] = req.stderr_to_stdout ? std::pair<UniqueFd, UniqueFd>() : make_pipe();
  auto [sync_r, sync_w] = make_pipe();

  const CpuMask cpus = cpu_mask(req.cpus);
  sigset_t ignored;
  sigemptyset(&ignored);
  for (const int sig : req.ignored_signals) sigaddset(&ignored, sig);
  const int stderr_w = req.stderr_to_stdout ? out_w.get() : err_w.get();
  const ChildSetup setup{::getpid(),   devnull.get(), out_w.get(), stderr_w,
                         sync_w.get(), fd_bound(),    &cpus,       &ignored};
  AllSignalsBlocked blocked;  // across fork: the child resets the handlers first
  const pid_t pid = ::fork();
  if (pid == 0) {
    child_main(setup, req.program.c_str(), argv.data(), envp.data());
  }
  const int fork_errno = errno;
  blocked.restore();
  if (pid < 0) {
    throw Error(std::string("cannot fork a worker: ") + std::strerror(fork_errno), 1);
  }
  ::setpgid(pid, pid);  // also from the parent, so killpg() works before the child got to run
  if (req.forked) req.forked(pid);
  out_w.reset();
  err_w.reset();
  sync_w.reset();

  wait_for_exec(sync_r, pid, req);

  Spawned s;
  s.pid = pid;
  try {
    s.exit_fd = watch_exit(pid);
  } catch (const Error&) {
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    throw;
  }
  s.stdout_fd = std::move(out_r);
  s.stderr_fd = std::move(err_r);
  return s;
}

}  // namespace ddprun::agent
