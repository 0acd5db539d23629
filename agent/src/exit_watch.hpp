#pragma once
// A descriptor that becomes readable once a child process has exited, for the agent's event loop
// (proc.cpp) and for poll (run_command.cpp). A pidfd where the kernel has them (Linux 5.3); on older
// kernels the read end of a pipe whose write end a small waiter thread closes when the child exits
// (docs/architecture.md, "Processes"). Either way the child is left a zombie for its owner to reap.
#include <sys/types.h>

#include "agent/spawn.hpp"

namespace ddprun::agent {

enum class ExitWatchKind {
  pidfd,   // pidfd_open worked
  waiter,  // the kernel has no pidfd_open (before 5.3): a waiter thread
  failed,  // any other error (EMFILE, ESRCH, ...): an error, as on a new kernel
};

// How to watch a child's exit, from pidfd_open's errno (0 when it returned a descriptor). Pure.
ExitWatchKind exit_watch_kind(int pidfd_open_errno);

// The exit watch for `pid`, an unreaped child of this process. Throws Error when none can be made.
UniqueFd watch_exit(pid_t pid);

// The fallback on its own (for the tests, which run on new kernels too): a pipe's read end, at end of
// file once `pid` has exited. Its thread blocks in waitid(WNOWAIT), so it never reaps, and ends when the
// child exits (also when the owner kills and reaps it first: waitid then fails with ECHILD).
UniqueFd watch_exit_with_waiter(pid_t pid);

}  // namespace ddprun::agent
