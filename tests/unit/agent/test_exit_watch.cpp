// The exit watch (agent/src/exit_watch.hpp): which mechanism, and the waiter-thread fallback that kernels
// before 5.3 get, run here on any kernel against real child processes.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <catch2/catch.hpp>
#include <cerrno>
#include <csignal>

#include "exit_watch.hpp"

using ddprun::agent::exit_watch_kind;
using ddprun::agent::ExitWatchKind;
using ddprun::agent::UniqueFd;

namespace {

// A child that sleeps until killed (or `seconds` pass).
pid_t start_sleeper(const char* seconds = "300") {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sleep", "sleep", seconds, static_cast<char*>(nullptr));
    ::_exit(127);
  }
  REQUIRE(pid > 0);
  return pid;
}

// Whether `fd` becomes readable within `ms` milliseconds.
bool readable(const UniqueFd& fd, int ms) {
  pollfd p{fd.get(), POLLIN, 0};
  int r = 0;
  while ((r = ::poll(&p, 1, ms)) < 0 && errno == EINTR) {
  }
  return r == 1;
}

// The child has exited and nobody reaped it: its zombie is still ours to reap.
bool unreaped_zombie(pid_t pid) {
  siginfo_t info{};
  return ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
         info.si_pid == pid;
}

void reap(pid_t pid, int expect_signal) {
  int st = 0;
  REQUIRE(::waitpid(pid, &st, 0) == pid);
  CHECK(WIFSIGNALED(st));
  CHECK(WTERMSIG(st) == expect_signal);
}

}  // namespace

TEST_CASE("exit watch: a pidfd where the kernel has one, the waiter only where it has no pidfd_open",
          "[exit_watch]") {
  CHECK(exit_watch_kind(0) == ExitWatchKind::pidfd);
  CHECK(exit_watch_kind(ENOSYS) == ExitWatchKind::waiter);
  // Real errors stay errors: the fallback would hide them (or watch a process that is not ours).
  for (const int err : {EMFILE, ENFILE, ESRCH, EINVAL, ENOMEM, EPERM}) {
    INFO(err);
    CHECK(exit_watch_kind(err) == ExitWatchKind::failed);
  }
}

TEST_CASE("exit watch: the waiter's descriptor turns readable when the child exits, and never reaps it",
          "[exit_watch]") {
  const pid_t pid = start_sleeper();
  const UniqueFd fd = ddprun::agent::watch_exit_with_waiter(pid);
  REQUIRE(fd);
  CHECK_FALSE(readable(fd, 200));  // still running
  ::kill(pid, SIGTERM);
  CHECK(readable(fd, 30000));
  CHECK(unreaped_zombie(pid));  // the owner reaps, after it saw the exit
  reap(pid, SIGTERM);
}

TEST_CASE("exit watch: a child that exited before the waiter started is seen too", "[exit_watch]") {
  const pid_t pid = start_sleeper("0");
  siginfo_t info{};
  REQUIRE(::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) == 0);  // a zombie now
  const UniqueFd fd = ddprun::agent::watch_exit_with_waiter(pid);
  CHECK(readable(fd, 30000));
  CHECK(unreaped_zombie(pid));
  int st = 0;
  REQUIRE(::waitpid(pid, &st, 0) == pid);
}

TEST_CASE("exit watch: killed and reaped by its owner before anyone looked, the waiter still ends",
          "[exit_watch]") {
  // The way Proc's destructor ends a worker: SIGKILL and reap, without waiting for the watch. The waiter
  // then finds no child (ECHILD) or sees the exit; either way it closes its end.
  for (int i = 0; i < 20; ++i) {
    const pid_t pid = start_sleeper();
    const UniqueFd fd = ddprun::agent::watch_exit_with_waiter(pid);
    ::kill(pid, SIGKILL);
    reap(pid, SIGKILL);
    CHECK(readable(fd, 30000));
  }
}

TEST_CASE("exit watch: watch_exit gives a descriptor that turns readable at the exit on this kernel",
          "[exit_watch]") {
  const pid_t pid = start_sleeper();
  const UniqueFd fd = ddprun::agent::watch_exit(pid);
  CHECK_FALSE(readable(fd, 100));
  ::kill(pid, SIGKILL);
  CHECK(readable(fd, 30000));
  CHECK(unreaped_zombie(pid));
  reap(pid, SIGKILL);
}
