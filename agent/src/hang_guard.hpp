#pragma once
// Everything --hang-timeout adds to one run, for the supervisor: the workers' heartbeat files and
// variables, the progress watch, and the collection of stacks that precedes a hang's teardown. With
// --max-restarts-without-progress alone: the heartbeat files, read for the steps they hold.
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/command.hpp"
#include "agent/hang_watch.hpp"
#include "agent/heartbeat_step.hpp"
#include "proc.hpp"
#include "run_settings.hpp"
#include "stacks.hpp"

namespace ddprun::agent {

class HangGuard {
 public:
  // `hung` gets this node's hung ranks, once, on the loop.
  HangGuard(boost::asio::io_context& io, const std::vector<std::unique_ptr<Proc>>& procs,
            HangSettings settings, std::function<void(const std::vector<HungRank>&)> hung);

  bool enabled() const { return watch_.enabled(); }
  // Heartbeat files: with --hang-timeout, or for the steps of --max-restarts-without-progress.
  bool heartbeats() const { return enabled() || s_.step_files; }
  // The highest step this node's ranks wrote to their heartbeat files (heartbeat_step.hpp).
  std::optional<Step> best_step() const { return best_heartbeat_step(paths_); }
  // Each worker's heartbeat file, in spawn (worker index) order; empty without heartbeat files.
  const std::vector<std::string>& heartbeat_files() const { return paths_; }
  std::chrono::milliseconds timeout() const { return s_.timeout.value_or(std::chrono::milliseconds{0}); }
  // Before spawning: how the workers run and their PATH (to find eu-stack).
  void prepare(const CommandSpec& spec, const std::string& path_env);
  // A worker's variables: its own, plus the hang ones when enabled (creates its heartbeat file).
  std::map<std::string, std::string> worker_env(const core::Worker& w, const std::vector<std::string>& base);
  void started(std::size_t worker, int rank, const std::map<std::string, std::string>& env);
  // The heartbeat files' private directory; "" without one.
  std::string private_dir() const { return heartbeats_ ? heartbeats_->private_dir() : std::string(); }

  void line(std::size_t worker, bool is_err, std::string_view text);
  void output(std::size_t worker) { watch_.progress(worker); }  // any bytes of output
  void exited(std::size_t worker) { watch_.exited(worker); }
  void stop() { watch_.stop(); }

  // Stacks of `hung` (`stacks_files`: live_stacks.hpp), then `done`. From then on the run ends as a hang
  // (declared()).
  void collect(const std::vector<HungRank>& hung, const std::vector<std::string>& stacks_files,
               std::function<void()> done);
  // Another node hung: the local ranks that are not printing now (usually waiting for it).
  std::vector<HungRank> silent_now() { return watch_.silent_for(hang_poll_interval(timeout())); }
  std::optional<SteadyTime> last_progress(std::size_t worker) const { return watch_.last_progress(worker); }
  bool declared() const { return declared_; }
  bool collecting() const { return stacks_.collecting(); }
  const std::vector<HungWorker>& result() const { return stacks_.result(); }

 private:
  HangSettings s_;  // declared before watch_, which is made from it
  HangWatch watch_;
  StackCollector stacks_;
  std::optional<HeartbeatFiles> heartbeats_;  // removed with the guard, after the run
  std::vector<std::string> paths_;            // the workers' heartbeat files
  bool python_ = false;                       // stacks by faulthandler, else eu-stack
  std::string path_env_;
  bool declared_ = false;
};

}  // namespace ddprun::agent
