#pragma once
// This node's live status for `ddprun top` (docs/observe.md): every interval the loop takes a
// snapshot (cheap: no syscalls), and a thread of its own adds each worker's RSS and CPU% from /proc,
// encodes it and hands it to the coordinator. The loop never waits for the store: a snapshot taken
// while the previous one is still being published replaces it. stop() publishes a last snapshot and
// joins the thread (the coordinator's publish_status never waits on the other nodes).
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "agent/coordinator.hpp"
#include "core/status.hpp"

namespace ddprun::agent {

using SteadyClock = std::chrono::steady_clock;

class StatusPublisher {
 public:
  StatusPublisher(boost::asio::io_context& io, Coordinator& coord, std::chrono::milliseconds interval);
  ~StatusPublisher();
  StatusPublisher(const StatusPublisher&) = delete;
  StatusPublisher& operator=(const StatusPublisher&) = delete;

  // On the loop's thread: a worker started, each of its output lines, and after each read its open
  // line (a progress bar's latest redraw; "" for none).
  void started(std::size_t worker);
  void line(std::size_t worker, std::string_view text);
  void output(std::size_t worker, std::string_view open_line);
  // Its last line (cleaned) and when it came; nullopt before the first.
  const std::string& last_line(std::size_t worker) const { return live_.at(worker).line; }
  std::optional<SteadyClock::time_point> last_output(std::size_t worker) const {
    return live_.at(worker).output;
  }
  SteadyClock::time_point start_time(std::size_t worker) const { return live_.at(worker).start; }

  // Publishes `snapshot()` now and then every interval, from the loop. `heartbeat_files()` (worker
  // index order, "" for none) are read off the loop for each rank's step (heartbeat_step.hpp).
  void start(std::function<core::NodeStatus()> snapshot,
             std::function<std::vector<std::string>()> heartbeat_files = {});
  // Before start(): each worker's stacks file (worker index order, "" for none; live_stacks.hpp) and
  // the workers' PATH (for eu-stack). The thread then answers `ddprun stacks` requests: after each
  // publication it looks at the request the store last pushed and, for a new nonce, collects the selected
  // ranks' stacks (each bounded) and writes this node's reply (docs/observe.md).
  void serve_stacks(std::vector<std::string> stacks_files, std::string path_env);
  // After the loop, before the exit barrier: a last snapshot (every rank ended), published before it
  // returns; the thread then goes on answering `ddprun stacks` with it, ended ranks as ended, every
  // interval until stop(), so that a node waiting at the barrier still answers (docs/observe.md).
  void workers_ended();
  // After the loop (or the barrier): a last snapshot, published unless workers_ended() did, then the
  // thread ends. Idempotent.
  void stop();

 private:
  struct Live {
    SteadyClock::time_point start{};
    std::optional<SteadyClock::time_point> output;
    std::string line;
  };
  struct CpuSample {
    std::uint64_t ticks = 0;
    SteadyClock::time_point at{};
  };
  void tick();
  void offer(core::NodeStatus s);
  void run_thread();
  void serve_until_stopped(const core::NodeStatus& last);
  void add_proc_figures(core::NodeStatus& s);
  void answer_stacks(const core::NodeStatus& s);
  static void add_steps(core::NodeStatus& s, const std::vector<std::string>& heartbeat_files);

  Coordinator& coord_;
  std::chrono::milliseconds interval_;
  boost::asio::steady_timer timer_;
  std::function<core::NodeStatus()> snapshot_;
  std::function<std::vector<std::string>()> heartbeat_files_;
  std::vector<Live> live_;  // the loop's only
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<core::NodeStatus> slot_;  // the next record to publish (the newest)
  std::vector<std::string> slot_files_;   // its ranks' heartbeat files
  bool stopping_ = false;
  bool ended_ = false;  // workers_ended(): the next record is the last
  bool last_published_ = false;
  bool stopped_ = false;
  std::thread thread_;
  std::map<std::int64_t, CpuSample> cpu_;  // the thread's only: last reading by pid
  std::vector<std::string> stacks_files_;  // set before start(), then the thread's only
  std::string path_env_;
  bool serve_stacks_ = false;
  std::string answered_nonce_;  // the thread's only: the last request answered
  std::optional<std::pair<std::string, std::string>> pending_reply_;  // not written yet: retried
};

}  // namespace ddprun::agent
