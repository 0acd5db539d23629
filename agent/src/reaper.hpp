#pragma once
// The reaper: a tiny process that outlives a SIGKILLed agent just long enough to SIGKILL what its
// workers started. PR_SET_PDEATHSIG kills only the worker itself; its children (DataLoader
// processes) would be re-parented and keep running. The agent forks the reaper before the first
// worker and tells it each worker's process group over a socket that only the agent holds. When
// that socket closes without a goodbye (the agent died, whatever killed it), the reaper SIGKILLs the
// recorded groups and exits. It kills nothing else, starts no thread, and never outlives the agent
// by more than those kills.
#include <sys/types.h>

#include "agent/spawn.hpp"

namespace ddprun::agent {

class Reaper {
 public:
  Reaper() = default;
  ~Reaper() { disarm(); }
  Reaper(const Reaper&) = delete;
  Reaper& operator=(const Reaper&) = delete;

  // Forks the reaper. If that fails the job still runs: the workers die with the agent, only their
  // children might not.
  void start();
  // Records a worker's process group (its pid).
  void watch(pid_t pgid) const;
  // The agent ends normally: the reaper exits without killing anything and is reaped. Call it only
  // once the workers are reaped or gone, never while one may still run. Idempotent.
  void disarm();
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  UniqueFd fd_;  // the agent's end of the socket
};

}  // namespace ddprun::agent
