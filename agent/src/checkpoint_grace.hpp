#pragma once
// The grace after a forwarded checkpoint signal (SIGUSR1/SIGUSR2). For --term-timeout the workers
// may exit on their own: a rank with nothing to save exits 140 at once while another still writes
// its checkpoint, so a failure in that time stops nobody until the grace is over (teardown_delay).
// A node whose workers all stopped that way stays until its grace is over, when it has peers.
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>

namespace ddprun::agent {

class CheckpointGrace {
 public:
  CheckpointGrace(boost::asio::io_context& io, std::chrono::milliseconds grace);

  // A checkpoint signal went to the workers: the grace starts again from now.
  void forwarded(int sig);
  // The signal whose grace runs now; 0 when none does.
  int signal() const;
  // Runs `stop` (the teardown) after teardown_delay: at once when that is 0. While one waits, an
  // earlier deadline replaces it and a later one is dropped.
  void after_failure(bool after_signal, std::function<void()> stop);
  // Runs `done` when the grace that runs now is over (at once when none runs), instead of a waiting
  // stop.
  void when_over(std::function<void()> done);
  void cancel();  // every worker exited: nothing left to stop

 private:
  using Clock = std::chrono::steady_clock;
  std::chrono::milliseconds left() const;
  void arm(Clock::time_point at, std::function<void()> run);

  std::chrono::milliseconds grace_;
  boost::asio::steady_timer timer_;
  int sig_ = 0;
  Clock::time_point until_{};   // the end of the grace that runs
  std::function<void()> stop_;  // the teardown that waits for the timer
  Clock::time_point stop_at_{};
};

}  // namespace ddprun::agent
