#pragma once
// `ddprun stacks` on this node (docs/observe.md): a hook that lets a Python worker print every
// thread's stack on a signal and keep running, and the collection of one rank's stack through it
// or, for a native worker (or a Python one whose hook did not register), through eu-stack.
#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "agent/private_dir.hpp"

namespace ddprun::agent {

// The signal the hook registers faulthandler on: SIGRTMIN+6 (40 with glibc). Not SIGUSR1/2, which
// training scripts use for checkpoints; a real-time signal nobody else in the stack claims. A
// function: SIGRTMIN is a libc call.
int stacks_signal();

// The private directory's <what> (PrivateDir): <TMPDIR>/ddprun-stacks-XXXXXX, holding the hook
// (sitecustomize.py) and one stacks file per rank; removed with the object, after the run.
inline constexpr const char* kStacksDir = "stacks";

// `env` plus the hook's variables for rank `rank`, the hook being in directory `dir`: PYTHONPATH with
// `dir` first (`their_pythonpath`, the worker's own, after it), DDPRUN_STACKS_FILE and
// DDPRUN_STACKS_SIGNAL. Pure: the run and the dry run (with the directory's name template) share it.
std::map<std::string, std::string> stacks_hook_env(std::map<std::string, std::string> env,
                                                   const std::string& their_pythonpath,
                                                   const std::string& dir, int rank);
// Rank `rank`'s stacks file in the hook's directory `dir`.
std::string stacks_hook_file(const std::string& dir, int rank);

class PythonStackHook {
 public:
  PythonStackHook() = default;
  PythonStackHook(const PythonStackHook&) = delete;
  PythonStackHook& operator=(const PythonStackHook&) = delete;

  // `env` plus the hook's variables for rank `rank`: PYTHONPATH with ddprun's directory first (the
  // worker's own PYTHONPATH, from `env` or else `base`, after it), DDPRUN_STACKS_FILE and
  // DDPRUN_STACKS_SIGNAL. Unchanged when the directory cannot be made (then eu-stack only).
  std::map<std::string, std::string> env(std::map<std::string, std::string> env,
                                         const std::vector<std::string>& base, int rank);
  // The stacks file handed to rank `rank`; "" without the hook.
  std::string file(int rank) const;
  // The hook's private directory; "" until made.
  const std::string& private_dir() const { return dir_.path(); }

 private:
  bool prepare();
  PrivateDir dir_;
  bool failed_ = false;
};

// One rank's stack, within about `bound`: when a Python process of the worker registered the hook
// (the marker in `stacks_file`, a process of the worker's group `pgid`), it is signalled and what
// faulthandler appends is returned; otherwise eu-stack on `pgid` (the worker's leader). Never a signal
// to a process that did not register. Blocks the caller: never the supervisor's loop.
std::string live_stack(pid_t pgid, const std::string& stacks_file, const std::string& path_env,
                       std::chrono::milliseconds bound);
// True when `stacks_file` names a live registered process of group `pgid` (live_stack would signal it).
bool hook_registered(pid_t pgid, const std::string& stacks_file);

}  // namespace ddprun::agent
