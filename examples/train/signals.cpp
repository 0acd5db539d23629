#include "signals.hpp"

#include <csignal>

namespace ddprun::train {
namespace {

// First SIGTERM/SIGUSR2 wins; repeats are ignored because Slurm and the launcher may both
// signal the worker, and a second signal must not cost the checkpoint. SIGKILL is the backstop.
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int signo) {
  if (g_stop_signal == 0) {
    g_stop_signal = signo;
  }
}

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR2, &sa, nullptr);
}

int stop_signal_received() {
  return static_cast<int>(g_stop_signal);
}

std::vector<double> stop_flags(int signo) {
  return {signo == SIGTERM ? 1.0 : 0.0, signo == SIGUSR2 ? 1.0 : 0.0};
}

int stop_from_flags(const std::vector<double>& sums) {
  return sums[0] > 0 ? SIGTERM : (sums[1] > 0 ? SIGUSR2 : 0);
}

}  // namespace ddprun::train
