#include "reaper.hpp"

#include <linux/close_range.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <csignal>
#include <cstdint>

#include "agent/signals.hpp"

namespace ddprun::agent {

namespace {

// Process groups the reaper kills; a node never runs this many workers.
constexpr int kMaxGroups = 4096;
pid_t g_groups[kMaxGroups];  // written only in the reaper, in its own copy of the memory
constexpr std::int32_t kGoodbye = 0;

void close_all_but(int keep) {
  if (::syscall(SYS_close_range, 0U, static_cast<unsigned>(keep - 1), 0U) == 0 &&
      ::syscall(SYS_close_range, static_cast<unsigned>(keep + 1), ~0U, 0U) == 0) {
    return;
  }
  rlimit rl{};
  const long max_fd =
      ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 65536 ? static_cast<long>(rl.rlim_cur) : 65536L;
  for (int fd = 0; fd < max_fd; ++fd) {
    if (fd != keep) ::close(fd);
  }
}

// Runs in the forked child: async-signal-safe calls only, no allocation (the agent has other
// threads, whose locks are frozen here).
[[noreturn]] void reaper_main(int sock) {
  // It shares the agent's process group and terminal: Ctrl-C or a TERM to the whole step must not
  // end it before the agent does. The end of the socket ends it (or SIGKILL).
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  struct sigaction dfl = ign;
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    const bool ignore = sig == SIGHUP || sig == SIGINT || sig == SIGQUIT || sig == SIGTERM ||
                        sig == SIGUSR1 || sig == SIGUSR2 || sig == SIGPIPE || sig == SIGALRM ||
                        sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU;
    if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, ignore ? &ign : &dfl, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);  // the agent blocked everything around fork
  // Every other descriptor closes: the agent's store connections and pipes must close when it dies.
  if (::dup2(sock, 3) < 0) ::_exit(1);
  close_all_but(3);
  ::prctl(PR_SET_NAME, "ddprun-reaper");

  int n = 0;
  for (;;) {
    std::int32_t v = 0;
    const ssize_t r = ::read(3, &v, sizeof v);  // SOCK_SEQPACKET: one record per read
    if (r < 0 && errno == EINTR) continue;
    if (r != static_cast<ssize_t>(sizeof v)) break;  // closed without a goodbye: the agent died
    if (v == kGoodbye) ::_exit(0);
    if (v > 1 && n < kMaxGroups) g_groups[n++] = v;
  }
  for (int i = 0; i < n; ++i) ::kill(-g_groups[i], SIGKILL);
  ::_exit(0);
}

}  // namespace

void Reaper::start() {
  if (pid_ > 0) return;
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return;
  AllSignalsBlocked blocked;  // across fork: the child resets the handlers first
  const pid_t pid = ::fork();
  if (pid == 0) reaper_main(sv[1]);
  blocked.restore();
  ::close(sv[1]);
  if (pid < 0) {
    ::close(sv[0]);
    return;
  }
  pid_ = pid;
  fd_.reset(sv[0]);
}

void Reaper::watch(pid_t pgid) const {
  if (!fd_) return;
  const std::int32_t v = pgid;
  ::send(fd_.get(), &v, sizeof v, MSG_NOSIGNAL | MSG_DONTWAIT);
}

void Reaper::disarm() {
  if (pid_ <= 0) return;
  const std::int32_t bye = kGoodbye;
  ::send(fd_.get(), &bye, sizeof bye, MSG_NOSIGNAL | MSG_DONTWAIT);
  fd_.reset();
  int st = 0;
  while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

}  // namespace ddprun::agent
