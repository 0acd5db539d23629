#include "agent/signals.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <utility>

#include "agent/error.hpp"
#include "agent/policy.hpp"

namespace ddprun::agent {

namespace {

std::atomic<int> g_write_fd{-1};

extern "C" void on_agent_signal(int sig) {
  const int saved_errno = errno;
  const int fd = g_write_fd.load(std::memory_order_relaxed);
  if (fd >= 0) {
    const auto byte = static_cast<unsigned char>(sig);
    [[maybe_unused]] const ssize_t w = ::write(fd, &byte, 1);  // full pipe: drop, never block
  }
  errno = saved_errno;
}

// The hold. One word, so that "release unless a signal was caught" is a single compare-and-swap:
// kReleased, or 0 (holding, nothing caught), or the first stopping signal caught while holding.
constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
constexpr int kReleased = -1;
std::atomic<int> g_hold{kReleased};
bool g_hold_installed = false;  // normal code only
struct sigaction g_before_hold[std::size(kStopSignals)];

extern "C" void on_held_signal(int sig) {
  int cur = g_hold.load();
  while (cur == 0 && !g_hold.compare_exchange_weak(cur, sig)) {
  }
  if (cur != kReleased) return;  // caught (the first one is kept)
  // Released while this signal was on its way: what the disposition before the hold would do.
  for (std::size_t i = 0; i < std::size(kStopSignals); ++i) {
    if (kStopSignals[i] == sig) ::sigaction(sig, &g_before_hold[i], nullptr);
  }
  ::raise(sig);  // delivered once this handler returns
}

}  // namespace

void hold_stop_signals() {
  if (!g_hold_installed) {
    struct sigaction sa {};
    sa.sa_handler = on_held_signal;
    sigfillset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (std::size_t i = 0; i < std::size(kStopSignals); ++i) {
      ::sigaction(kStopSignals[i], &sa, &g_before_hold[i]);
    }
    g_hold_installed = true;
  }
  int released = kReleased;
  g_hold.compare_exchange_strong(released, 0);
}

int held_stop_signal() {
  const int cur = g_hold.load();
  return cur > 0 ? cur : 0;
}

void keep_stop_signal(int sig) {
  int cur = 0;
  g_hold.compare_exchange_strong(cur, sig);
}

int release_stop_signals() {
  int cur = 0;
  if (!g_hold.compare_exchange_strong(cur, kReleased)) return cur > 0 ? cur : 0;
  if (g_hold_installed) {
    for (std::size_t i = 0; i < std::size(kStopSignals); ++i) {
      ::sigaction(kStopSignals[i], &g_before_hold[i], nullptr);
    }
    g_hold_installed = false;
  }
  return 0;
}

SignalWatcher::SignalWatcher(const std::vector<int>& sigs) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw Error(std::string("cannot create the signal pipe: ") + std::strerror(errno), 1);
  }
  int expected = -1;
  if (!g_write_fd.compare_exchange_strong(expected, p[1])) {
    ::close(p[0]);
    ::close(p[1]);
    throw Error("ddprun internal error: workers are already being supervised in this process", 1);
  }
  read_fd_ = p[0];
  write_fd_ = p[1];

  struct sigaction sa {};
  sa.sa_handler = on_agent_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  std::vector<int> all = sigs;
  all.push_back(SIGPIPE);
  for (int sig : all) {
    Saved s{sig, {}};
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    ::sigaction(sig, sig == SIGPIPE ? &ign : &sa, &s.action);
    saved_.push_back(s);
  }
  // The caller may have blocked these (the application's threads usually do not); unblock them here.
  sigset_t set;
  sigemptyset(&set);
  for (int sig : sigs) sigaddset(&set, sig);
  ::pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  // A stop the hold caught just before the run belongs to the run.
  if (int held = g_hold.load(); held > 0 && g_hold.compare_exchange_strong(held, 0)) {
    const auto byte = static_cast<unsigned char>(held);
    [[maybe_unused]] const ssize_t w = ::write(write_fd_, &byte, 1);
  }
}

SignalWatcher::~SignalWatcher() {
  for (const auto& s : saved_) ::sigaction(s.sig, &s.action, nullptr);
  g_write_fd.store(-1);
  // A stop that came after the run's loop stopped reading (node 0 gathering the records of a failed
  // attempt) belongs to the hold, so that it cancels the restart instead of being lost with the pipe.
  for (const int sig : drain()) {
    if (is_stopping_signal(sig)) {
      keep_stop_signal(sig);
      break;
    }
  }
  ::close(read_fd_);
  ::close(write_fd_);
}

std::vector<int> SignalWatcher::drain() const {
  std::vector<int> out;
  unsigned char buf[64];
  for (;;) {
    const ssize_t n = ::read(read_fd_, buf, sizeof buf);
    if (n > 0) {
      for (ssize_t i = 0; i < n; ++i) out.push_back(buf[i]);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;
    }
  }
  return out;
}

StopDuringWait::StopDuringWait(int signal_fd, std::function<void(int)> on_stop)
    : signal_fd_(signal_fd), on_stop_(std::move(on_stop)) {
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) throw Error(std::string("cannot create an eventfd: ") + std::strerror(errno), 1);
  thread_ = std::thread([this] { run(); });
}

StopDuringWait::~StopDuringWait() {
  finish();
  ::close(wake_fd_);
}

int StopDuringWait::finish() {
  if (thread_.joinable()) {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t w = ::write(wake_fd_, &one, sizeof one);
    thread_.join();
  }
  return taken_.load();
}

void StopDuringWait::run() {
  for (;;) {
    pollfd fds[2] = {{signal_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    unsigned char buf[64];
    const ssize_t n = ::read(signal_fd_, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return;
    for (ssize_t i = 0; i < n; ++i) {
      if (!is_stopping_signal(buf[i]) || taken_.load() != 0) continue;
      taken_ = buf[i];
      on_stop_(buf[i]);
    }
  }
}

}  // namespace ddprun::agent
