// TcpStore requests: sending, reading answers under a deadline, pipelined sets, closing.
#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "client_impl.hpp"

namespace ddprun::store {
namespace detail {
namespace {

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return left > 1'000'000'000 ? 1'000'000'000 : static_cast<int>(left);
}

}  // namespace

std::string wait_fd(int f, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{f, events, 0};
    const int ms = remaining_ms(deadline);
    if (ms == 0) return "timed out";
    const int r = ::poll(&p, 1, ms);
    if (r > 0) return {};
    if (r == 0) continue;  // loop re-checks the deadline
    if (errno != EINTR) return std::strerror(errno);
  }
}

}  // namespace detail

void TcpStore::Impl::fail(Error::Kind kind, const std::string& op, const std::string& key,
                          const std::string& why) {
  drop(why);
  const std::string what = key.empty() ? fmt::format("store {} at {}: {}", op, where, why)
                                       : fmt::format("store {} '{}' at {}: {}", op, key, where, why);
  throw Error(kind, what, op, where, key);
}

void TcpStore::Impl::drop(const std::string& why) {
  std::lock_guard wlk(wmu);
  const int f = fd.exchange(-1);
  if (f >= 0) ::close(f);
  if (broken.empty()) broken = why;
}

// Ends the connection with a reset when every answer has been read and everything we sent has
// been acknowledged: nothing can be lost, and neither side keeps the connection in TIME_WAIT or
// pays for the FIN/ACK exchange (thousands of agents leave at the same moment). Otherwise a
// normal close.
void TcpStore::Impl::close_quietly() {
  const int f = fd.load();
  if (f >= 0 && !hello_pending && unacked.empty()) {
    int unsent = 0;
    if (::ioctl(f, SIOCOUTQ, &unsent) == 0 && unsent == 0) {
      const linger lg{1, 0};
      ::setsockopt(f, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
  }
  drop("closed by this client");
}

void TcpStore::Impl::write_all(const std::string& frame, Clock::time_point deadline, const std::string& op,
                               const std::string& key, int flags) {
  std::lock_guard wlk(wmu);
  std::size_t off = 0;
  while (off < frame.size()) {
    const int f = fd.load();
    if (f < 0) fail(Error::Kind::io, op, key, "connection closed");
    const ssize_t n = ::send(f, frame.data() + off, frame.size() - off, MSG_NOSIGNAL | flags);
    if (n > 0) {
      off += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      std::string w = detail::wait_fd(f, POLLOUT, deadline);
      if (!w.empty()) fail(Error::Kind::timeout, op, key, "timed out sending the request");
      continue;
    }
    fail(Error::Kind::io, op, key, fmt::format("connection lost while sending: {}", std::strerror(errno)));
  }
}

bool TcpStore::Impl::take_out_of_band(proto::Response& r) {
  if (!proto::out_of_band(r.status)) return false;
  if (r.status == proto::Status::event) {
    std::lock_guard lk(ev_mu);
    events.push_back({static_cast<std::size_t>(r.number), std::move(r.value)});
  }
  return true;  // a pong only tells that the server is there: heard() did that
}

proto::Response TcpStore::Impl::read_response(Clock::time_point deadline, const std::string& op,
                                              const std::string& key) {
  for (;;) {
    if (!answers.empty()) {
      proto::Response r = std::move(answers.front());
      answers.pop_front();
      return r;
    }
    std::optional<std::string> payload;
    try {
      payload = parser.next();
      if (payload) {
        proto::Response r = proto::decode_response(*payload, opts.limits);
        if (take_out_of_band(r)) continue;
        return r;
      }
    } catch (const Error& e) {
      fail(Error::Kind::protocol, op, key, e.what());
    }
    const int f = fd.load();
    if (f < 0) fail(Error::Kind::io, op, key, "connection closed");
    // The answer is never there yet right after a request: wait first, then read (one syscall
    // less per call than trying the read first).
    std::string w = detail::wait_fd(f, POLLIN, deadline);
    if (!w.empty()) {
      fail(Error::Kind::timeout, op, key,
           w == "timed out" ? "timed out waiting for the store server's answer" : w);
    }
    const ssize_t n = ::recv(f, buf.data(), buf.size(), 0);
    if (n > 0) {
      heard(static_cast<std::size_t>(n));
      parser.feed(std::string_view(buf.data(), static_cast<std::size_t>(n)));
      continue;
    }
    if (n == 0) fail(Error::Kind::io, op, key, "connection closed by the store server");
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
    fail(Error::Kind::io, op, key, fmt::format("connection lost while receiving: {}", std::strerror(errno)));
  }
}

// Reads the answers owed before the next one: the hello's, then those of pipelined sets.
void TcpStore::Impl::drain(Clock::time_point deadline, const std::string& op, const std::string& key) {
  if (hello_pending) check_hello(deadline, op, key);
  while (!unacked.empty()) {
    const proto::Response r = read_response(deadline, op, key);
    if (r.status != proto::Status::ok) {
      // The answers behind this one are still unread: the stream cannot be trusted any more.
      const std::string set_key = unacked.front();
      fail(Error::Kind::rejected, "set", set_key, r.value);
    }
    unacked.erase(unacked.begin());
  }
}

void TcpStore::Impl::pump() {
  for (;;) {
    const int f = fd.load();
    if (f < 0) fail(Error::Kind::io, "watch", {}, "connection closed");
    const ssize_t n = ::recv(f, buf.data(), buf.size(), MSG_DONTWAIT);
    if (n > 0) {
      heard(static_cast<std::size_t>(n));
      parser.feed(std::string_view(buf.data(), static_cast<std::size_t>(n)));
      continue;
    }
    if (n == 0) fail(Error::Kind::io, "watch", {}, "connection closed by the store server");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    fail(Error::Kind::io, "watch", {},
         fmt::format("connection lost while receiving: {}", std::strerror(errno)));
  }
  try {
    while (auto payload = parser.next()) {
      proto::Response r = proto::decode_response(*payload, opts.limits);
      if (!take_out_of_band(r)) answers.push_back(std::move(r));
    }
  } catch (const Error& e) {
    fail(Error::Kind::protocol, "watch", {}, e.what());
  }
}

void TcpStore::Impl::require_connected(const std::string& op, const std::string& key) const {
  if (fd.load() >= 0) return;
  throw Error(
      Error::Kind::io,
      fmt::format("store {} at {}: not connected ({})", op, where, broken.empty() ? "closed" : broken), op,
      where, key);
}

proto::Response TcpStore::Impl::call(const proto::Request& q, Millis wait, bool pipelined) {
  std::lock_guard lk(mu);
  const std::string op = proto::to_string(q.op);
  const std::string& key = q.key.empty() && !q.keys.empty() ? q.keys.front() : q.key;
  require_connected(op, key);
  const std::string frame = proto::encode_request(q);
  if (frame.size() - proto::kHeaderSize > opts.limits.max_message) {
    throw Error(Error::Kind::usage,
                fmt::format("store {} at {}: request of {} bytes exceeds the limit of {}", op, where,
                            frame.size(), opts.limits.max_message),
                op, where, key);
  }
  const auto deadline = Clock::now() + opts.op_timeout + clamp_timeout(wait);
  write_all(frame, deadline, op, key);
  if (pipelined && unacked.size() < detail::kMaxUnacked) {
    unacked.push_back(key);
    return {};
  }
  drain(deadline, op, key);
  proto::Response r = read_response(deadline, op, key);
  if (r.status == proto::Status::error) {
    throw Error(Error::Kind::rejected, fmt::format("store {} at {}: {}", op, where, r.value), op, where, key);
  }
  return r;
}

void TcpStore::Impl::check_key(const std::string& key, const char* op) const {
  if (key.size() > opts.limits.max_key) {
    throw Error(
        Error::Kind::usage,
        fmt::format("store {}: key of {} bytes exceeds the limit of {}", op, key.size(), opts.limits.max_key),
        op, where, key.substr(0, 64));
  }
}

}  // namespace ddprun::store
