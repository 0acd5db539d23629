#pragma once
// A blocking TCPStore client for tests: raw bytes on a socket, every read bounded by a timeout, so
// a server that does not answer fails the test instead of hanging it.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "store/c10d_codec.hpp"

namespace testnet {

class C10dClient {
 public:
  // Connects to ip:port, from `source` when given (a loopback alias such as 127.0.0.2).
  C10dClient(std::uint16_t port, ddprun::store::c10d::Layout layout, const std::string& ip = "127.0.0.1",
             const std::string& source = "")
      : layout_(layout) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (!source.empty()) {
      sockaddr_in src{};
      src.sin_family = AF_INET;
      ::inet_pton(AF_INET, source.c_str(), &src.sin_addr);
      ::bind(fd_, reinterpret_cast<const sockaddr*>(&src), sizeof src);
    }
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    ::inet_pton(AF_INET, ip.c_str(), &sa.sin_addr);
    if (::connect(fd_, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) {
      ::close(fd_);
      throw std::runtime_error("connect failed");
    }
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    // Best effort: a server that refuses the peer may already have reset the connection.
    if (layout == ddprun::store::c10d::Layout::v22) {
      ::send(fd_, "\x00\xce\xf7\x85\x3c", 5, MSG_NOSIGNAL);
    }
  }
  ~C10dClient() { ::close(fd_); }
  C10dClient(const C10dClient&) = delete;
  C10dClient& operator=(const C10dClient&) = delete;

  int fd() const { return fd_; }

  void send_raw(const std::string& bytes) {
    std::size_t off = 0;
    while (off < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) throw std::runtime_error("send failed");
      off += static_cast<std::size_t>(n);
    }
  }
  void send(ddprun::store::c10d::Op op, std::vector<std::string> keys = {},
            std::vector<std::string> values = {}, std::int64_t number = 0, std::uint32_t u32 = 0) {
    ddprun::store::c10d::Request r;
    r.op = op;
    r.keys = std::move(keys);
    r.values = std::move(values);
    r.number = number;
    r.u32 = u32;
    send_raw(ddprun::store::c10d::encode_request(layout_, r).value());
  }

  // Exactly n bytes, or nullopt when the server closed the connection or `timeout` passed.
  std::optional<std::string> read(std::size_t n,
                                  std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::string out;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (out.size() < n) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[65536];
      const ssize_t got = ::recv(fd_, buf, std::min(sizeof buf, n - out.size()), 0);
      if (got <= 0) return std::nullopt;
      out.append(buf, static_cast<std::size_t>(got));
    }
    return out;
  }
  std::optional<std::uint8_t> read_u8(std::chrono::milliseconds t = std::chrono::seconds(10)) {
    auto b = read(1, t);
    if (!b) return std::nullopt;
    return static_cast<std::uint8_t>((*b)[0]);
  }
  std::optional<std::int64_t> read_i64() {
    auto b = read(8);
    if (!b) return std::nullopt;
    return ddprun::store::c10d::get_i64(*b, 0);
  }
  std::optional<std::string> read_bytes() {
    const auto n = read_i64();
    if (!n) return std::nullopt;
    return read(static_cast<std::size_t>(*n));
  }
  // Nothing arrives within `t` (a deferred answer stays deferred).
  bool silent_for(std::chrono::milliseconds t) {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, static_cast<int>(t.count())) == 0;
  }

 private:
  int fd_ = -1;
  ddprun::store::c10d::Layout layout_;
};

}  // namespace testnet
