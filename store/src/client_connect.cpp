// TcpStore connecting: resolving the endpoint, connect attempts retried with backoff until the
// connect timeout, and the hello.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "client_impl.hpp"
#include "store/auth.hpp"
#include "store/backoff.hpp"
#include "store/sockaddr.hpp"

namespace ddprun::store {
namespace {

using detail::Address;
using detail::Attempt;
using detail::Clock;

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

// A numeric address needs no resolver: getaddrinfo would read /etc/hosts and friends on
// every connection (visible with 1000s of clients).
bool numeric_address(const std::string& host, std::uint16_t port, Address& a) {
  a = {};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&a.addr);
  if (::inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    a.len = sizeof(sockaddr_in);
    return true;
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&a.addr);
  if (::inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    a.len = sizeof(sockaddr_in6);
    return true;
  }
  return false;
}

// The endpoint's addresses, resolved again on every round (a node may come up late in DNS);
// empty, with `err` set, when the name does not resolve.
std::vector<Address> resolve(const std::string& host, std::uint16_t port, std::string& err) {
  Address one;
  if (numeric_address(host, port, one)) return {one};
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (gai != 0) {
    err = fmt::format("cannot resolve host: {}", ::gai_strerror(gai));
    return {};
  }
  std::vector<Address> out;
  for (const addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_addrlen > sizeof(sockaddr_storage)) continue;
    Address a;
    std::memcpy(&a.addr, ai->ai_addr, ai->ai_addrlen);
    a.len = ai->ai_addrlen;
    out.push_back(a);
  }
  ::freeaddrinfo(res);
  return out;
}

// One connect attempt to one address; returns the socket or -1 with `err` set.
int connect_one(const Address& a, Clock::time_point deadline, std::string& err) {
  const int f = ::socket(a.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (f < 0) {
    err = std::strerror(errno);
    return -1;
  }
  if (::connect(f, a.sa(), a.len) != 0) {
    if (errno != EINPROGRESS) {
      err = std::strerror(errno);
      ::close(f);
      return -1;
    }
    std::string w = detail::wait_fd(f, POLLOUT, deadline);
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

}  // namespace

void TcpStore::Impl::connect() {
  const auto start = Clock::now();
  const auto deadline = start + opts.connect_timeout;
  std::vector<Attempt> attempts;
  Backoff backoff(opts.backoff_initial, opts.backoff_max, Backoff::cheap_seed());
  for (;;) {
    if (connect_round(deadline, attempts)) return;
    const auto now = Clock::now();
    if (now >= deadline || opts.one_round) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(deadline - now, backoff.next()));
  }
  const auto waited = std::chrono::duration<double>(Clock::now() - start).count();
  throw Error(Error::Kind::timeout,
              fmt::format("cannot reach the rendezvous store at {} after {:.1f} s and {} "
                          "attempt(s) ({}); is node 0's agent running, and is "
                          "the endpoint right?",
                          where, waited, attempts.size(), describe_attempts(attempts)),
              "connect", where);
}

// One try of every address of the endpoint; true once one is connected and greeted. A refusal
// (run id, version, credential) is thrown: retrying cannot help.
bool TcpStore::Impl::connect_round(Clock::time_point deadline, std::vector<Attempt>& attempts) {
  std::string err;
  const std::vector<Address> addresses = resolve(opts.host, opts.port, err);
  if (!err.empty()) attempts.push_back({where, err});
  for (const Address& a : addresses) {
    // Each attempt gets a little time even at the very end, so the last one can still answer.
    const auto attempt_deadline = std::max(std::min(deadline, Clock::now() + opts.op_timeout),
                                           Clock::now() + std::chrono::milliseconds(200));
    if (try_address(a, attempt_deadline, err)) return true;
    attempts.push_back({sockaddr_text(a.sa()), err});
  }
  return false;
}

// Connects to one address and sends the hello; false, with `err` set, when that failed.
bool TcpStore::Impl::try_address(const Address& a, Clock::time_point deadline, std::string& err) {
  const int f = connect_one(a, deadline, err);
  if (f < 0) return false;
  fd = f;
  broken.clear();
  parser = proto::FrameParser(opts.limits.max_message);
  try {
    handshake(deadline);
    return true;
  } catch (const Error& e) {
    if (e.kind() == Error::Kind::rejected || e.kind() == Error::Kind::other_run) throw;
    // The server closed on us (e.g. its connection cap): count it as a failed attempt.
    err = broken.empty() ? std::string(e.what()) : broken;
    return false;
  }
}

// Bounded by the connect attempt's deadline: a peer that accepts but never answers (not our
// store) must not hold the agent past --rdzv-timeout.
void TcpStore::Impl::handshake(Clock::time_point deadline) {
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
void TcpStore::Impl::check_hello(Clock::time_point deadline, const std::string& op, const std::string& key) {
  const proto::Response r = read_response(deadline, op, key);
  hello_pending = false;
  if (r.status != proto::Status::ok) {
    drop(r.value);
    throw Error(r.number == proto::kRefusedOtherRun ? Error::Kind::other_run : Error::Kind::rejected,
                fmt::format("the rendezvous store at {} refused this agent: {}", where, r.value), "connect",
                where);
  }
}

}  // namespace ddprun::store
