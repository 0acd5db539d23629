#pragma once
// The reaper: a tiny process that outlives a SIGKILLed agent just long enough to SIGKILL what its
// workers started and remove the agent's private temporary directories. PR_SET_PDEATHSIG kills only
// the worker itself; its children (DataLoader processes) would be re-parented and keep running, and
// the directories ddprun makes without --log-dir (ddprun-errors-*, ddprun-heartbeat-*,
// ddprun-stacks-*) would stay in /tmp. The agent forks the reaper before the first worker and tells
// it each worker's process group and each such directory over a socket that only the agent holds.
// When that socket closes without a goodbye (the agent died, whatever killed it), the reaper SIGKILLs
// the recorded groups, removes the recorded directories and exits. It kills nothing else, starts no
// thread, and never outlives the agent by more than that.
//
// The fork execs ddprun's own image (/proc/self/exe) with the argv {"ddprun-reaper"}: the reaper's
// command line is never the agent's, so `pgrep -f`, `pkill -f` and `ps` find only the agent by its
// command line. Its entry runs before main in every program that links this unit (reaper.cpp).
#include <sys/types.h>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "agent/spawn.hpp"

namespace ddprun::agent {

// The reaper's argv[0] and its whole command line.
inline constexpr const char* kReaperName = "ddprun-reaper";

// One record on the agent's socket (SOCK_SEQPACKET: one record per message). Pure codec.
struct ReaperRecord {
  enum class Kind { group, dir, goodbye, invalid };
  Kind kind = Kind::invalid;
  pid_t group = 0;       // Kind::group: a worker's process group id (> 1)
  std::string_view dir;  // Kind::dir: a directory to remove when the agent dies
};
std::string reaper_group_record(pid_t pgid);
std::string reaper_dir_record(const std::string& dir);
std::string reaper_goodbye_record();
// Invalid for anything else: an unknown tag, a group id <= 1, a directory the reaper must not remove
// (reaper_may_remove).
ReaperRecord parse_reaper_record(std::string_view message);
// Only ddprun's own private directories: an absolute, normalized path whose last component starts
// with "ddprun-" (PrivateDir's names), never "/" or a path with "." or ".." components.
bool reaper_may_remove(std::string_view dir);

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
  // Records a private directory to remove if the agent dies; "" and one already recorded are skipped.
  void remove_on_death(const std::string& dir);
  // The agent ends normally: the reaper exits without killing or removing anything and is reaped.
  // Call it only once the workers are reaped or gone, never while one may still run. Idempotent.
  void disarm();
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  UniqueFd fd_;                 // the agent's end of the socket
  std::set<std::string> dirs_;  // already recorded
};

}  // namespace ddprun::agent
