#include "store/client.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include <fmt/core.h>

#include "store/error.hpp"
#include "store/sockaddr.hpp"

namespace ddprun::rdzv {
namespace {

using Clock = std::chrono::steady_clock;

struct Attempt {
  std::string target;  // "addr:port" or "host:port"
  std::string error;
};

// "attempt 1: a:1: Connection refused; attempts 2-40: a:1: Connection refused" - every attempt,
// with identical neighbours folded so a long retry loop stays one readable line.
std::string describe_attempts(const std::vector<Attempt>& attempts) {
  std::string out;
  std::size_t i = 0;
  while (i < attempts.size()) {
    std::size_t j = i;
    while (j + 1 < attempts.size() && attempts[j + 1].target == attempts[i].target &&
           attempts[j + 1].error == attempts[i].error) {
      ++j;
    }
    if (!out.empty()) out += "; ";
    if (i == j) {
      out += fmt::format("attempt {}: {}: {}", i + 1, attempts[i].target, attempts[i].error);
    } else {
      out += fmt::format("attempts {}-{}: {}: {}", i + 1, j + 1, attempts[i].target, attempts[i].error);
    }
    i = j + 1;
  }
  return out;
}

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return left > 1'000'000'000 ? 1'000'000'000 : static_cast<int>(left);
}

}  // namespace

// Pipelined sets in flight before a set waits for the answers (bounds what the server queues).
constexpr std::size_t kMaxUnacked = 4;

struct TcpStore::Impl {
  explicit Impl(ClientOptions o)
      : opts(std::move(o)),
        where(fmt::format("{}:{}", opts.host, opts.port)),
        parser(opts.limits.max_message) {}

  ClientOptions opts;
  std::string where;
  mutable std::mutex mu;
  std::atomic<int> fd{-1};
  std::string broken;          // why the connection is gone (empty while healthy)
  bool hello_pending = false;  // the server's answer to our hello is not read yet
  // Keys of sets sent whose acknowledgements are not read yet (in order, behind the hello's).
  std::vector<std::string> unacked;
  proto::FrameParser parser;
  std::vector<char> buf = std::vector<char>(4096);

  [[noreturn]] void fail(Error::Kind kind, const std::string& op, const std::string& key,
                         const std::string& why) {
    drop(why);
    const std::string what = key.empty() ? fmt::format("store {} at {}: {}", op, where, why)
                                         : fmt::format("store {} '{}' at {}: {}", op, key, where, why);
    throw Error(kind, what, op, where, key);
  }

  void drop(const std::string& why) {
    const int f = fd.exchange(-1);
    if (f >= 0) ::close(f);
    if (broken.empty()) broken = why;
  }

  // Ends the connection with a reset when every answer has been read and everything we sent has
  // been acknowledged: nothing can be lost, and neither side keeps the connection in TIME_WAIT or
  // pays for the FIN/ACK exchange (thousands of agents leave at the same moment). Otherwise a
  // normal close.
  void close_quietly() {
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

  // Waits until fd is ready for `events` or the deadline passes. Returns an empty string when ready.
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

  // One connect attempt to one address; returns the socket or -1 with `err` set.
  int connect_one(const addrinfo* ai, Clock::time_point deadline, std::string& err) {
    const int f = ::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (f < 0) {
      err = std::strerror(errno);
      return -1;
    }
    if (::connect(f, ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        err = std::strerror(errno);
        ::close(f);
        return -1;
      }
      std::string w = wait_fd(f, POLLOUT, deadline);
      int soerr = 0;
      socklen_t len = sizeof soerr;
      if (w.empty() && ::getsockopt(f, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0) soerr = errno;
      if (!w.empty() || soerr != 0) {
        err = w.empty() ? std::strerror(soerr) : "connect timed out";
        ::close(f);
        return -1;
      }
    }
    const int one = 1;
    ::setsockopt(f, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ::setsockopt(f, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    return f;
  }

  // A numeric address needs no resolver: getaddrinfo would read /etc/hosts and friends on
  // every connection (visible with 1000s of clients).
  static bool numeric_address(const std::string& host, std::uint16_t port, sockaddr_storage& ss,
                              socklen_t& len) {
    ss = {};
    auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
    if (::inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
      v4->sin_family = AF_INET;
      v4->sin_port = htons(port);
      len = sizeof(sockaddr_in);
      return true;
    }
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
    if (::inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
      v6->sin6_family = AF_INET6;
      v6->sin6_port = htons(port);
      len = sizeof(sockaddr_in6);
      return true;
    }
    return false;
  }

  void connect() {
    const auto start = Clock::now();
    const auto deadline = start + opts.connect_timeout;
    std::vector<Attempt> attempts;
    // Seeded cheaply (std::random_device costs a syscall and shows in profiles of 1000s of
    // clients); only used when a retry is needed.
    std::minstd_rand rng(
        static_cast<std::uint32_t>(std::hash<std::thread::id>{}(std::this_thread::get_id()) ^
                                   static_cast<std::size_t>(start.time_since_epoch().count())));
    std::uniform_real_distribution<double> jitter(0.5, 1.5);
    Millis backoff = opts.backoff_initial;
    for (;;) {
      std::string err;
      addrinfo hints{};
      hints.ai_family = AF_UNSPEC;
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* res = nullptr;
      sockaddr_storage numeric{};
      addrinfo one{};
      int gai = 0;
      if (numeric_address(opts.host, opts.port, numeric, one.ai_addrlen)) {
        one.ai_family = numeric.ss_family;
        one.ai_socktype = SOCK_STREAM;
        one.ai_addr = reinterpret_cast<sockaddr*>(&numeric);
      } else {
        const std::string port = std::to_string(opts.port);
        gai = ::getaddrinfo(opts.host.c_str(), port.c_str(), &hints, &res);
      }
      const addrinfo* first = res != nullptr ? res : &one;
      if (gai != 0) {
        attempts.push_back({where, fmt::format("cannot resolve host: {}", ::gai_strerror(gai))});
      } else {
        for (const addrinfo* ai = first; ai != nullptr; ai = ai->ai_next) {
          // Each attempt gets a little time even at the very end, so the last one can still answer.
          const auto attempt_deadline = std::max(std::min(deadline, Clock::now() + opts.op_timeout),
                                                 Clock::now() + std::chrono::milliseconds(200));
          const int f = connect_one(ai, attempt_deadline, err);
          if (f < 0) {
            attempts.push_back({sockaddr_text(ai->ai_addr), err});
            continue;
          }
          fd = f;
          broken.clear();
          parser = proto::FrameParser(opts.limits.max_message);
          try {
            handshake(attempt_deadline);
            if (res != nullptr) ::freeaddrinfo(res);
            return;
          } catch (const Error& e) {
            if (e.kind() == Error::Kind::rejected) {
              if (res != nullptr) ::freeaddrinfo(res);
              throw;
            }
            // The server closed on us (e.g. its connection cap): count it as a failed attempt.
            attempts.push_back({sockaddr_text(ai->ai_addr), broken.empty() ? std::string(e.what()) : broken});
          }
        }
        if (res != nullptr) ::freeaddrinfo(res);
      }
      const auto now = Clock::now();
      if (now >= deadline) break;
      const auto delay = std::min<Clock::duration>(
          deadline - now,
          std::chrono::duration_cast<Clock::duration>(
              std::chrono::duration<double, std::milli>(static_cast<double>(backoff.count()) * jitter(rng))));
      std::this_thread::sleep_for(delay);
      backoff = std::min(backoff * 2, opts.backoff_max);
    }
    const auto waited = std::chrono::duration<double>(Clock::now() - start).count();
    throw Error(Error::Kind::timeout,
                fmt::format("cannot reach the rendezvous store at {} after {:.1f} s and {} "
                            "attempt(s) ({}); is the master agent (node rank 0) running, and is "
                            "the endpoint right?",
                            where, waited, attempts.size(), describe_attempts(attempts)),
                "connect", where);
  }

  // Bounded by the connect attempt's deadline: a peer that accepts but never answers (not our
  // store) must not hold the agent past --rdzv-timeout.
  void handshake(Clock::time_point deadline) {
    proto::Hello h;
    h.run_id = opts.run_id;
    h.label = opts.label;
    h.auth = static_cast<std::uint8_t>(opts.auth.mode);
    try {
      h.credential = auth::make_credential(opts.auth, opts.run_id, opts.label);
    } catch (const Error& e) {
      drop(e.what());  // no descriptor left behind when munged is gone
      throw;
    }
    h.liveness_ms = static_cast<std::uint32_t>(
        std::min<std::int64_t>(std::max<std::int64_t>(opts.liveness.count(), 0), 0xffffffffLL));
    // MSG_MORE lets the kernel hold the hello (up to 200 ms) and send it in one segment with the
    // first request: one packet and one server wake-up less per connection.
    write_all(proto::encode_hello(h), deadline, "connect", {}, opts.wait_for_handshake ? 0 : MSG_MORE);
    hello_pending = true;
    if (opts.wait_for_handshake) check_hello(deadline, "connect", {});
  }

  // Reads the server's answer to our hello (pipelined: it arrives before the first call's).
  void check_hello(Clock::time_point deadline, const std::string& op, const std::string& key) {
    const proto::Response r = read_response(deadline, op, key);
    hello_pending = false;
    if (r.status != proto::Status::ok) {
      drop(r.value);
      throw Error(Error::Kind::rejected,
                  fmt::format("the rendezvous store at {} refused this agent: {}", where, r.value), "connect",
                  where);
    }
  }

  void write_all(const std::string& frame, Clock::time_point deadline, const std::string& op,
                 const std::string& key, int flags = 0) {
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
        std::string w = wait_fd(f, POLLOUT, deadline);
        if (!w.empty()) fail(Error::Kind::timeout, op, key, "timed out sending the request");
        continue;
      }
      fail(Error::Kind::io, op, key, fmt::format("connection lost while sending: {}", std::strerror(errno)));
    }
  }

  proto::Response read_response(Clock::time_point deadline, const std::string& op, const std::string& key) {
    for (;;) {
      std::optional<std::string> payload;
      try {
        payload = parser.next();
        if (payload) return proto::decode_response(*payload, opts.limits);
      } catch (const Error& e) {
        fail(Error::Kind::protocol, op, key, e.what());
      }
      const int f = fd.load();
      if (f < 0) fail(Error::Kind::io, op, key, "connection closed");
      // The answer is never there yet right after a request: wait first, then read (one syscall
      // less per call than trying the read first).
      std::string w = wait_fd(f, POLLIN, deadline);
      if (!w.empty()) {
        fail(Error::Kind::timeout, op, key,
             w == "timed out" ? "timed out waiting for the store server's answer" : w);
      }
      const ssize_t n = ::recv(f, buf.data(), buf.size(), 0);
      if (n > 0) {
        parser.feed(std::string_view(buf.data(), static_cast<std::size_t>(n)));
        continue;
      }
      if (n == 0) fail(Error::Kind::io, op, key, "connection closed by the store server");
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      fail(Error::Kind::io, op, key,
           fmt::format("connection lost while receiving: {}", std::strerror(errno)));
    }
  }

  // Reads the answers owed before the next one: the hello's, then those of pipelined sets.
  void drain(Clock::time_point deadline, const std::string& op, const std::string& key) {
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

  void require_connected(const std::string& op, const std::string& key) const {
    if (fd.load() >= 0) return;
    throw Error(
        Error::Kind::io,
        fmt::format("store {} at {}: not connected ({})", op, where, broken.empty() ? "closed" : broken), op,
        where, key);
  }

  // `pipelined`: send the request and return without reading its answer (sets only: their answer
  // carries nothing but success, which the next call or flush() checks).
  proto::Response call(const proto::Request& q, Millis wait = Millis{0}, bool pipelined = false) {
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
    if (pipelined && unacked.size() < kMaxUnacked) {
      unacked.push_back(key);
      return {};
    }
    drain(deadline, op, key);
    proto::Response r = read_response(deadline, op, key);
    if (r.status == proto::Status::error) {
      throw Error(Error::Kind::rejected, fmt::format("store {} at {}: {}", op, where, r.value), op, where,
                  key);
    }
    return r;
  }

  void check_key(const std::string& key, const char* op) const {
    if (key.size() > opts.limits.max_key) {
      throw Error(Error::Kind::usage,
                  fmt::format("store {}: key of {} bytes exceeds the limit of {}", op, key.size(),
                              opts.limits.max_key),
                  op, where, key.substr(0, 64));
    }
  }
};

TcpStore::TcpStore(ClientOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  std::lock_guard lk(impl_->mu);
  impl_->connect();
}

TcpStore::~TcpStore() {
  {
    // A pipelined set must reach the store even when the caller ends right behind it.
    std::lock_guard lk(impl_->mu);
    if (impl_->fd.load() >= 0 && !impl_->unacked.empty()) {
      try {
        impl_->drain(Clock::now() + std::min<Millis>(impl_->opts.op_timeout, Millis{5000}), "flush", {});
      } catch (const Error&) {
      }
    }
    // No other thread may use a store being destroyed: no shutdown() needed to wake one.
    impl_->close_quietly();
  }
}

void TcpStore::flush() {
  std::lock_guard lk(impl_->mu);
  if (impl_->unacked.empty() && !impl_->hello_pending) return;
  impl_->require_connected("flush", {});
  impl_->drain(Clock::now() + impl_->opts.op_timeout, "flush", {});
}

namespace {
std::uint64_t to_ms(Millis t) {
  return static_cast<std::uint64_t>(clamp_timeout(t).count());
}
}  // namespace

void TcpStore::set(const std::string& key, const std::string& value) {
  impl_->check_key(key, "set");
  proto::Request q;
  q.op = proto::Op::set;
  q.key = key;
  q.value = value;
  impl_->call(q, Millis{0}, /*pipelined=*/true);
}

std::optional<std::string> TcpStore::get(const std::string& key, Millis timeout) {
  impl_->check_key(key, "get");
  proto::Request q;
  q.op = proto::Op::get;
  q.key = key;
  q.timeout_ms = to_ms(timeout);
  proto::Response r = impl_->call(q, timeout);
  if (r.status != proto::Status::ok) return std::nullopt;
  return std::move(r.value);
}

std::int64_t TcpStore::add(const std::string& key, std::int64_t delta) {
  impl_->check_key(key, "add");
  proto::Request q;
  q.op = proto::Op::add;
  q.key = key;
  q.number = delta;
  return impl_->call(q).number;
}

std::string TcpStore::compare_set(const std::string& key, const std::string& expected,
                                  const std::string& desired) {
  impl_->check_key(key, "compare_set");
  proto::Request q;
  q.op = proto::Op::compare_set;
  q.key = key;
  q.value = expected;
  q.value2 = desired;
  return std::move(impl_->call(q).value);
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  for (const auto& k : keys) impl_->check_key(k, "check");
  proto::Request q;
  q.op = proto::Op::check;
  q.keys = keys;
  return impl_->call(q).number != 0;
}

bool TcpStore::del(const std::string& key) {
  impl_->check_key(key, "del");
  proto::Request q;
  q.op = proto::Op::del;
  q.key = key;
  return impl_->call(q).number != 0;
}

std::int64_t TcpStore::num_keys() {
  proto::Request q;
  q.op = proto::Op::num_keys;
  return impl_->call(q).number;
}

bool TcpStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  for (const auto& k : keys) impl_->check_key(k, "wait");
  proto::Request q;
  q.op = proto::Op::wait;
  q.keys = keys;
  q.timeout_ms = to_ms(timeout);
  return impl_->call(q, timeout).status == proto::Status::ok;
}

std::optional<std::size_t> TcpStore::wait_any(const std::vector<std::string>& keys, Millis timeout) {
  for (const auto& k : keys) impl_->check_key(k, "wait_any");
  proto::Request q;
  q.op = proto::Op::wait_any;
  q.keys = keys;
  q.timeout_ms = to_ms(timeout);
  proto::Response r = impl_->call(q, timeout);
  if (r.status != proto::Status::ok) return std::nullopt;
  return static_cast<std::size_t>(r.number);
}

void TcpStore::ping() {
  proto::Request q;
  q.op = proto::Op::ping;
  impl_->call(q);
}

void TcpStore::close() {
  // shutdown() wakes a call blocked in poll() on another thread without racing on the descriptor;
  // the descriptor itself is closed by whoever holds the mutex.
  const int f = impl_->fd.load();
  if (f >= 0) ::shutdown(f, SHUT_RDWR);
  std::lock_guard lk(impl_->mu);
  impl_->drop("closed by this client");
}

bool TcpStore::connected() const {
  return impl_->fd.load() >= 0;
}
std::string TcpStore::endpoint() const {
  return impl_->where;
}
int TcpStore::native_handle() const {
  return impl_->fd.load();
}

}  // namespace ddprun::rdzv
