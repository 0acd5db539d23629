#include "signals.hpp"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <thread>

#include "core.hpp"

namespace ddprun::train {
namespace {

// The handler may run on any thread, so the state it shares is lock-free atomics.
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free);

// First SIGTERM/SIGUSR2 wins; repeats are ignored because Slurm and the launcher may both
// signal the worker, and a second signal must not cost the checkpoint. SIGKILL is the backstop.
std::atomic<int> g_stop_signal{0};
std::atomic<bool> g_deferred{false};  // false: set-up mode, a stop signal exits at once

// Set-up mode: the /dev/shm file to remove on the way out. The path is written only while the
// flag is clear (a run registers one name), so the handler never reads a half-written path.
char g_shm_path[256];
std::atomic<bool> g_shm_path_set{false};

// The set-up mode line for each stop signal, formatted before any signal can come.
char g_term_line[160];
char g_usr2_line[160];

void format_early_line(char (&line)[160], int signo) {
  std::snprintf(line, sizeof line,
                "ddprun-train: stopped by signal %d during set-up, before the first step; exit %d, "
                "checkpoint unchanged\n",
                signo, preempt_exit_code(signo));
}

// Async-signal-safe: write(2), unlink(2) and _exit(2) only.
[[noreturn]] void exit_during_setup(int signo) {
  if (g_shm_path_set.load()) {
    ::unlink(g_shm_path);
  }
  const char* line = signo == SIGTERM ? g_term_line : g_usr2_line;
  std::size_t left = 0;
  while (line[left] != '\0') {
    ++left;
  }
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, line, left);
    if (n <= 0 && errno != EINTR) {
      break;
    }
    if (n > 0) {
      line += n;
      left -= static_cast<std::size_t>(n);
    }
  }
  ::_exit(preempt_exit_code(signo));
}

extern "C" void on_stop_signal(int signo) {
  if (!g_deferred.load()) {
    exit_during_setup(signo);
  }
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, signo);
}

}  // namespace

void install_stop_handlers() {
  format_early_line(g_term_line, SIGTERM);
  format_early_line(g_usr2_line, SIGUSR2);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR2, &sa, nullptr);
}

void defer_stop_signals() {
  g_deferred.store(true);
  g_shm_path_set.store(false);
}

void remove_on_early_stop(const std::string& shm_name) {
  g_shm_path_set.store(false);
  if (shm_name.empty()) {
    return;
  }
  const int n = std::snprintf(g_shm_path, sizeof g_shm_path, "/dev/shm%s", shm_name.c_str());
  if (n > 0 && static_cast<std::size_t>(n) < sizeof g_shm_path) {
    g_shm_path_set.store(true);
  }
}

int stop_signal_received() {
  return g_stop_signal.load();
}

int await_stop_signal(std::chrono::milliseconds patience) {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  while (stop_signal_received() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return stop_signal_received();
}

std::vector<double> stop_flags(int signo) {
  return {signo == SIGTERM ? 1.0 : 0.0, signo == SIGUSR2 ? 1.0 : 0.0};
}

int stop_from_flags(const std::vector<double>& sums) {
  return sums[0] > 0 ? SIGTERM : (sums[1] > 0 ? SIGUSR2 : 0);
}

}  // namespace ddprun::train
