#include "exit_watch.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "agent/error.hpp"
#include "agent/signals.hpp"

namespace ddprun::agent {

ExitWatchKind exit_watch_kind(int pidfd_open_errno) {
  if (pidfd_open_errno == 0) return ExitWatchKind::pidfd;
  // ENOSYS is what a kernel without the call answers (and a seccomp filter that forbids it); every other
  // error is a real one that the fallback would only hide.
  return pidfd_open_errno == ENOSYS ? ExitWatchKind::waiter : ExitWatchKind::failed;
}

namespace {

// The thread's argument, the pid and the pipe's write end in the pointer itself: nothing is allocated,
// so nothing leaks when the agent exits before the thread ran.
static_assert(sizeof(void*) >= sizeof(std::uint64_t), "ddprun runs on 64-bit Linux");

void* pack(pid_t pid, int fd) {
  const auto bits =
      (static_cast<std::uint64_t>(static_cast<std::uint32_t>(pid)) << 32U) | static_cast<std::uint32_t>(fd);
  // The pointer carries the two numbers, and is never dereferenced.
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(bits));  // NOLINT(performance-no-int-to-ptr)
}

// The waiter thread: blocks until the child has exited (or is gone), then closes the pipe's write end,
// which makes the read end readable (end of file). The owner reaps.
extern "C" void* wait_for_exit(void* arg) {
  const auto bits = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(arg));
  const auto pid = static_cast<id_t>(bits >> 32U);
  const auto write_fd = static_cast<int>(bits & 0xffffffffU);
  siginfo_t info{};
  while (::waitid(P_PID, pid, &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
  }
  ::close(write_fd);
  return nullptr;
}

Error watch_error(pid_t pid, const char* what, int err) {
  return Error(
      "cannot watch process " + std::to_string(pid) + "'s exit (" + what + "): " + std::strerror(err), 1);
}

}  // namespace

UniqueFd watch_exit_with_waiter(pid_t pid) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw watch_error(pid, "pipe", errno);
  UniqueFd read_end(p[0]);
  pthread_attr_t attr;
  ::pthread_attr_init(&attr);
  ::pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t thread{};
  int rc = 0;
  {
    AllSignalsBlocked blocked;  // inherited: the agent's signals are never handled on this thread
    rc = ::pthread_create(&thread, &attr, wait_for_exit, pack(pid, p[1]));
  }
  ::pthread_attr_destroy(&attr);
  if (rc != 0) {
    ::close(p[1]);
    throw watch_error(pid, "a waiter thread", rc);
  }
  return read_end;
}

UniqueFd watch_exit(pid_t pid) {
  const auto fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  const int err = fd < 0 ? errno : 0;
  switch (exit_watch_kind(err)) {
    case ExitWatchKind::pidfd:
      ::fcntl(fd, F_SETFD, FD_CLOEXEC);
      return UniqueFd(fd);
    case ExitWatchKind::waiter:
      return watch_exit_with_waiter(pid);
    case ExitWatchKind::failed:
      break;
  }
  throw watch_error(pid, "pidfd_open", err);
}

}  // namespace ddprun::agent
