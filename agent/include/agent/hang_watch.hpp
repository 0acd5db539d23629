#pragma once
// Hang detection (--hang-timeout): a rank is hung when it wrote no line of output and did not touch
// its heartbeat file (DDPRUN_HEARTBEAT_FILE) for the timeout. The decision is pure (hung_ranks);
// HangWatch only records progress and polls the heartbeat files' mtimes on the event loop.
#include <sys/types.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstddef>
#include <ctime>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/command.hpp"

namespace ddprun::agent {

using SteadyTime = std::chrono::steady_clock::time_point;

// One local worker's last sign of life.
struct RankProgress {
  std::size_t worker = 0;  // index among this node's workers
  int rank = 0;
  SteadyTime last{};    // its start, its last output line or its last heartbeat touch
  bool exited = false;  // an ended worker is never hung
};

struct HungRank {
  std::size_t worker = 0;
  int rank = 0;
  std::chrono::milliseconds silent{0};
};

// The live workers silent for `timeout` or longer at `now`, the longest silent first (then by rank).
std::vector<HungRank> hung_ranks(SteadyTime now, const std::vector<RankProgress>& progress,
                                 std::chrono::milliseconds timeout);

// How often the heartbeat files are polled: a quarter of the timeout, at most 1 s, at least 10 ms.
std::chrono::milliseconds hang_poll_interval(std::chrono::milliseconds timeout);

// Whether a hung worker's stack is a Python one (faulthandler on SIGABRT) or native (eu-stack):
// python for a .py script or -m module (the command builder adds the interpreter), or a command
// whose program is named python* (e.g. `python3 train.py` with --no-python).
bool python_worker(const CommandSpec& spec);

// What a Python process's own command line (/proc/PID/cmdline: the interpreter, its options, then
// the script, -m or -c) says about its stack on SIGABRT. -I and -E make Python ignore every PYTHON*
// variable: PYTHONFAULTHANDLER, and PYTHONPATH, so ddprun's stacks hook too; -X faulthandler turns
// faulthandler on whatever the environment. Pure; options after the script are the script's.
struct PythonFlags {
  char ignores_env = 0;       // 'I' or 'E' (the first given), 0 without either
  bool faulthandler = false;  // -X faulthandler
};
PythonFlags python_flags(const std::vector<std::string>& argv);

// A worker's variables with --hang-timeout: DDPRUN_HEARTBEAT_FILE, and for Python
// PYTHONFAULTHANDLER=1 unless the user set it (in `base`, the agent's environment, or `env`), so
// that SIGABRT makes faulthandler dump every thread.
std::map<std::string, std::string> hang_env(std::map<std::string, std::string> env,
                                            const std::vector<std::string>& base,
                                            const std::string& heartbeat, bool python);

// The private directory's <what> (PrivateDir) of the heartbeat files without --log-dir:
// <TMPDIR>/ddprun-heartbeat-XXXXXX.
inline constexpr const char* kHeartbeatDir = "heartbeat";

// A worker's variables with heartbeat files: hang_env with --hang-timeout (`hang`), else (steps for
// --max-restarts-without-progress only) DDPRUN_HEARTBEAT_FILE alone.
std::map<std::string, std::string> heartbeat_env(std::map<std::string, std::string> env,
                                                 const std::vector<std::string>& base,
                                                 const std::string& heartbeat, bool python, bool hang);

// `stack` cut to `limit` bytes at a line end, with a note of what was left out.
std::string cap_stack(std::string stack, std::size_t limit = 16 * 1024);

// Records progress and calls `hung` once, on the loop, when hung_ranks finds any.
class HangWatch {
 public:
  HangWatch(boost::asio::io_context& io, std::optional<std::chrono::milliseconds> timeout,
            std::function<void(const std::vector<HungRank>&)> hung);

  bool enabled() const { return timeout_.has_value(); }
  // A started worker and its heartbeat file ("" for none). Starts polling with the first one.
  void add(std::size_t worker, int rank, const std::string& heartbeat_file);
  void progress(std::size_t worker);  // a line of output
  void exited(std::size_t worker);
  void stop();  // no more checks (teardown, or a hang being handled)
  // The live workers silent for `threshold` now (heartbeats read first).
  std::vector<HungRank> silent_for(std::chrono::milliseconds threshold);
  // A worker's last progress as last seen (start, output, heartbeat as last polled); nullopt when
  // disabled. For `ddprun top`'s status.
  std::optional<SteadyTime> last_progress(std::size_t worker) const;

 private:
  struct Beat {
    std::string file;
    std::optional<timespec> mtime;
  };
  void arm();
  void poll_heartbeats();

  std::optional<std::chrono::milliseconds> timeout_;
  std::function<void(const std::vector<HungRank>&)> hung_;
  boost::asio::steady_timer timer_;
  std::vector<RankProgress> progress_;
  std::vector<Beat> beats_;
  bool stopped_ = false;
  bool armed_ = false;
};

}  // namespace ddprun::agent
