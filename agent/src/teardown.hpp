#pragma once
// Stopping this node's workers: a signal (SIGTERM, or the one the agent got) to every live process
// group, SIGKILL to every group after the grace period; once every worker ended, SIGKILL to what
// they left behind and a bounded wait for the output such processes still hold. A forwarded
// checkpoint signal goes to each live worker process only (signal_target).
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>
#include <vector>

#include "proc.hpp"

namespace ddprun::agent {

class Teardown {
 public:
  Teardown(boost::asio::io_context& io, const std::vector<std::unique_ptr<Proc>>& procs,
           std::chrono::milliseconds grace);

  bool started() const { return started_; }
  // Sends `sig` to every live group and arms SIGKILL after the grace. Once only.
  void start(int sig);
  void signal_live(int sig) const;  // a forwarded signal, to each live worker (Proc::signal)
  void kill_all() const;            // SIGKILL to every group, live or not
  // Every worker exited: no more grace, kill the leftovers, stop reading after the drain timeout.
  // Once only.
  void all_exited();

 private:
  const std::vector<std::unique_ptr<Proc>>& procs_;
  std::chrono::milliseconds grace_;
  boost::asio::steady_timer kill_timer_;
  boost::asio::steady_timer drain_timer_;
  bool started_ = false;
  bool cleanup_started_ = false;
};

}  // namespace ddprun::agent
