#pragma once
// Raw-socket helpers for tests that play a misbehaving peer.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace testnet {

// Connects to 127.0.0.1:port; returns the fd or -1.
inline int raw_connect(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline void send_all(int fd, const std::string& bytes) {
  std::size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<std::size_t>(n);
  }
}

// True when the peer closes the connection within `timeout` (any bytes it sends are skipped).
inline bool closed_by_peer(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0) return true;
    if (n < 0) return errno == ECONNRESET;
  }
}

// True when the peer hangs up within `timeout`, without reading anything (POLLRDHUP).
inline bool hung_up(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLRDHUP, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) > 0 &&
        (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) {
      return true;
    }
  }
}

// A listening socket that never accepts: connects succeed (backlog) but nothing ever answers.
struct SilentListener {
  int fd = -1;
  std::uint16_t port = 0;
  SilentListener() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa);
    ::listen(fd, 16);
    socklen_t len = sizeof sa;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
    port = ntohs(sa.sin_port);
  }
  ~SilentListener() { ::close(fd); }
};

// True when nothing holds `port` on any address (a bind without SO_REUSEADDR succeeds).
inline bool port_free(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  const bool ok = ::bind(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) == 0;
  ::close(fd);
  return ok;
}

// A port nobody listens on, the first of kPortBlock free ones (an elastic job's failover ports count
// up from it). A bound-then-released ephemeral port raced: any outgoing connection of a test running
// beside this one could take it before ddprun bound it (CI: 'Address already in use'). So: below
// Linux's ephemeral range (32768-60999), where no connection is given a port, and below ddprun's
// derived ports (20000-32767); each block is claimed for this process's life by a lock file, so test
// processes running at once never get the same block.
inline constexpr int kPortBlock = 8;
inline std::uint16_t unused_port() {
  constexpr int kLow = 10000, kBlocks = (20000 - kLow) / kPortBlock;
  static std::atomic<unsigned> next{
      static_cast<unsigned>(::getpid()) * 7919u +
      static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count())};
  const std::string dir = "/tmp/ddprun-test-ports";
  if (::mkdir(dir.c_str(), 01777) == 0) ::chmod(dir.c_str(), 01777);  // every user's tests share it
  for (int tries = 0; tries < kBlocks; ++tries) {
    const int base = kLow + static_cast<int>(next++ % kBlocks) * kPortBlock;
    const std::string lock = dir + "/" + std::to_string(base);
    const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd);
      continue;
    }
    bool all_free = true;
    for (int i = 0; i < kPortBlock && all_free; ++i)
      all_free = port_free(static_cast<std::uint16_t>(base + i));
    if (all_free) return static_cast<std::uint16_t>(base);  // fd kept open: the claim lasts until exit
    ::close(fd);
  }
  SilentListener l;  // every block taken: the old way, an ephemeral port bound then released
  return l.port;
}

}  // namespace testnet
