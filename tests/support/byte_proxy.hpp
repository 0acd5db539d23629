#pragma once
// A TCP relay on loopback that counts the bytes passing each way: a real agent given the relay's port
// as its rendezvous endpoint talks to the real master through it, and the counts are exactly what the
// agent received and sent on its store connection(s). Kernel counters cannot say that: /proc/PID/io's
// rchar counts no socket reads (recv), and tcp_info is gone once the socket closes. Used by the e2e
// tests and by bench/rdzv_scale --real-agent.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace testnet {

class ByteProxy {
 public:
  // Listens on 127.0.0.1 (a free port) and relays each connection to 127.0.0.1:target.
  explicit ByteProxy(std::uint16_t target) : target_(target) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&sa), sizeof sa);
    ::listen(listen_fd_, 64);
    socklen_t len = sizeof sa;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len);
    port_ = ntohs(sa.sin_port);
    thread_ = std::thread([this] { loop(); });
  }
  ~ByteProxy() {
    stop_ = true;
    thread_.join();
    for (const Pair& p : pairs_) {
      ::close(p.client);
      ::close(p.server);
    }
    ::close(listen_fd_);
  }
  ByteProxy(const ByteProxy&) = delete;
  ByteProxy& operator=(const ByteProxy&) = delete;

  std::uint16_t port() const { return port_; }
  // Bytes the server sent to the clients (what the agent received), and the other way.
  std::uint64_t to_client() const { return down_.load(); }
  std::uint64_t to_server() const { return up_.load(); }
  int connections() const { return accepted_.load(); }

 private:
  struct Pair {
    int client = -1, server = -1;
    bool client_open = true, server_open = true;  // each side's reading half
  };

  static void send_all(int fd, const char* data, std::size_t n) {
    while (n > 0) {
      const ssize_t w = ::send(fd, data, n, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return;
      data += w;
      n -= static_cast<std::size_t>(w);
    }
  }

  // Connects to the target, retrying while it is not listening yet (an agent may reach the relay
  // before the master listens: to the agent that is a slow answer, not a closed connection).
  int connect_target() const {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!stop_ && std::chrono::steady_clock::now() < end) {
      const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in sa{};
      sa.sin_family = AF_INET;
      sa.sin_port = htons(target_);
      sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(s, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) == 0) return s;
      ::close(s);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

  void accept_one() {
    const int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) return;
    const int s = connect_target();
    if (s < 0) {
      ::close(c);
      return;
    }
    ++accepted_;
    pairs_.push_back({c, s});
  }

  // Relays what is waiting on `from` to `to`; false at its end (then `to` gets the half-close).
  bool relay(int from, int to, std::atomic<std::uint64_t>& count) {
    char buf[65536];
    const ssize_t n = ::recv(from, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) return true;
    if (n <= 0) {
      ::shutdown(to, SHUT_WR);
      return false;
    }
    count += static_cast<std::uint64_t>(n);
    send_all(to, buf, static_cast<std::size_t>(n));
    return true;
  }

  void loop() {
    while (!stop_) {
      std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
      for (const Pair& p : pairs_) {
        fds.push_back({p.client_open ? p.client : -1, POLLIN, 0});
        fds.push_back({p.server_open ? p.server : -1, POLLIN, 0});
      }
      if (::poll(fds.data(), fds.size(), 20) <= 0) continue;
      for (std::size_t i = 0; i < pairs_.size(); ++i) {
        Pair& p = pairs_[i];
        if (fds[1 + 2 * i].revents != 0) p.client_open = relay(p.client, p.server, up_);
        if (fds[2 + 2 * i].revents != 0) p.server_open = relay(p.server, p.client, down_);
      }
      if (fds[0].revents != 0) accept_one();
    }
  }

  std::uint16_t target_ = 0, port_ = 0;
  int listen_fd_ = -1;
  std::vector<Pair> pairs_;  // the relay thread's own
  std::atomic<std::uint64_t> down_{0}, up_{0};
  std::atomic<int> accepted_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace testnet
