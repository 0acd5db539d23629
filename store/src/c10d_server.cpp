// The workers' store server: torch's TCPStore semantics on one epoll thread, one small handler
// per operation (docs/protocol.md, "The workers' store").
#include "store/c10d_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <unordered_map>
#include <unordered_set>

#include <fmt/core.h>

#include "c10d_loop.hpp"
#include "c10d_net.hpp"
#include "store/auth.hpp"
#include "store/error.hpp"
#include "store/limits.hpp"
#include "store/sockaddr.hpp"

namespace ddprun::store {

using c10d::Op;
using c10d::Request;

namespace {

// A protocol violation or a broken limit: the connection is closed (torch's servers do the same;
// the protocol has no error reply).
[[noreturn]] void refuse(const std::string& what) {
  throw Error(Error::Kind::protocol, "worker store: " + what, "c10d");
}

constexpr std::size_t kReadChunk = 64 * 1024;
constexpr std::size_t kMaxDirectWaits = 16;  // a torch client has one WAIT pending at a time
constexpr std::size_t kMaxRelayWaits = 1u << 20;
constexpr std::size_t kMaxWatches = 1024;

// std::stoll's reading of a stored counter, as torch's servers parse it: optional spaces and sign,
// digits, anything after ignored; no digits or out of range is an error.
std::optional<std::int64_t> parse_counter(const std::string& s) {
  std::size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  const bool plus = i < s.size() && s[i] == '+';
  if (plus) ++i;
  std::int64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data() + i, s.data() + s.size(), v);
  if (ec != std::errc() || p == s.data() + i) return std::nullopt;
  if (plus && i < s.size() && s[i] == '-') return std::nullopt;
  return v;
}

}  // namespace

namespace c10d {
struct SConn;
struct Listener final : Handler {
  int fd = -1;
  C10dServer::Impl* s = nullptr;
  void on_event(std::uint32_t events) override;
};
}  // namespace c10d

struct C10dServer::Impl {
  explicit Impl(C10dServerOptions o);
  ~Impl();
  void start();
  void shutdown();  // loop thread

  // Connections.
  void accept_some(int lfd);
  bool admitted(const sockaddr_storage& peer) const;
  void on_conn(c10d::SConn& c, std::uint32_t events);
  void read_some(c10d::SConn& c);
  void process(c10d::SConn& c, std::string_view data);
  void flush_all();
  void flush(c10d::SConn& c);
  void set_interest(c10d::SConn& c);
  void close(c10d::SConn& c, const std::string& reason, bool error);
  void log_line(const std::string& line);
  void log_limited(const std::string& line);
  std::string limit_advice() const;

  // Requests: one handler each.
  void handle(c10d::SConn& c, Request& q);
  std::size_t begin(c10d::SConn& c, std::uint32_t tag);
  void end(c10d::SConn& c, std::size_t start);
  void reply_u8(c10d::SConn& c, std::uint32_t tag, std::uint8_t v);
  void reply_i64(c10d::SConn& c, std::uint32_t tag, std::int64_t v);
  void reply_bytes(c10d::SConn& c, std::uint32_t tag, std::string_view v);
  void on_set(std::string& key, std::string& value);
  void on_compare_set(c10d::SConn& c, Request& q);
  void on_add(c10d::SConn& c, Request& q);
  void on_check(c10d::SConn& c, Request& q);
  void on_wait(c10d::SConn& c, Request& q);
  void on_delete(c10d::SConn& c, Request& q);
  void on_append(Request& q);
  void on_multi_get(c10d::SConn& c, Request& q);
  void on_cancel(c10d::SConn& c, Request& q);
  void on_watch(c10d::SConn& c, Request& q);
  void on_queue_push(Request& q);
  void on_queue_pop(c10d::SConn& c, Request& q);
  void on_list(c10d::SConn& c, Request& q);

  // The keyspace.
  bool exists(const std::string& key) const;
  void account(std::ptrdiff_t delta);
  void wake(const std::string& key);
  void wake_one(const std::string& key);
  void finish_wait(std::uint64_t id);
  void drop_waits(c10d::SConn& c);
  void compact_waiting();
  void notify(const std::string& key, c10d::WatchEvent type, std::string_view old_value,
              std::string_view new_value);
  void clear_keyspace();

  C10dServerOptions opts;
  std::shared_ptr<C10dLoop> loop_owner;
  C10dLoop::Impl* loop = nullptr;
  std::uint64_t flusher = 0;
  std::vector<std::unique_ptr<c10d::Listener>> listeners;
  std::uint16_t bound_port = 0;
  std::size_t max_conns = 0;
  FdLimits fd_limits;
  int spare_fd = -1;  // given up to accept-and-close a peer when descriptors run out
  bool stopped = false;

  std::unordered_map<std::uint64_t, std::unique_ptr<c10d::SConn>> conns;
  std::uint64_t next_serial = 0;
  std::vector<c10d::SConn*> dirty;
  std::array<char, kReadChunk> buf{};

  std::unordered_map<std::string, std::string> kv;
  std::unordered_map<std::string, std::deque<std::string>> queues;
  std::size_t stored = 0;
  struct Wait {
    std::uint64_t conn = 0;
    std::uint32_t tag = 0;
    std::uint32_t remaining = 0;
  };
  std::unordered_map<std::uint64_t, Wait> waits;
  std::uint64_t next_wait = 0;
  std::unordered_map<std::string, std::vector<std::uint64_t>> waiting;  // key -> wait ids (some stale)
  std::size_t refs_total = 0;
  std::size_t refs_live = 0;
  std::unordered_map<std::string, std::vector<std::pair<std::uint64_t, std::uint32_t>>> watchers;

  std::unordered_set<std::string> allowed;
  auth::LogLimiter limiter{5, std::chrono::seconds(10)};

  std::atomic<std::size_t> n_conns{0};
  std::atomic<std::uint64_t> n_refused{0};
  std::atomic<std::uint64_t> n_dropped{0};
  std::atomic<std::uint64_t> n_requests{0};
  std::atomic<std::size_t> n_keys{0};
};

namespace c10d {

struct SConn final : Handler {
  SConn(C10dServer::Impl* server, int f, std::uint64_t sr, const Limits& l, Layout legacy)
      : s(server), fd(f), serial(sr), parser(l, legacy) {}
  void on_event(std::uint32_t events) override { s->on_conn(*this, events); }
  std::size_t unsent() const { return out.size() - out_off; }

  C10dServer::Impl* s;
  int fd;
  std::uint64_t serial;
  Parser parser;
  std::string in;  // bytes of a request not yet whole
  std::size_t in_off = 0;
  std::string out;  // answers the socket has not taken yet
  std::size_t out_off = 0;
  std::vector<std::uint64_t> waits;  // its pending WAITs
  std::size_t watches = 0;
  sockaddr_storage peer{};
  bool dirty = false;
  bool want_out = false;  // EPOLLOUT armed
  bool paused = false;    // reading stopped until its answers drain
  bool closed = false;
};

void Listener::on_event(std::uint32_t) {
  s->accept_some(fd);
}

}  // namespace c10d

using c10d::SConn;

C10dServer::Impl::Impl(C10dServerOptions o) : opts(std::move(o)) {
  loop_owner = opts.loop ? opts.loop : std::make_shared<C10dLoop>();
  loop = loop_owner->impl_.get();
  fd_limits = raise_fd_limit();
  max_conns = opts.max_connections != 0 ? opts.max_connections : connection_cap(fd_limits.soft);
  if (opts.admit_local) {
    for (const auto& a : local_addresses()) allowed.insert(a);
  }
}

C10dServer::Impl::~Impl() {
  if (spare_fd >= 0) ::close(spare_fd);
}

void C10dServer::Impl::start() {
  // Bind every host first, in the caller's thread, so a failure is the constructor's exception.
  std::vector<int> fds;
  try {
    std::uint16_t port = opts.port;
    for (const auto& host : opts.hosts) {
      const int fd = c10d::listen_on(host, port);
      fds.push_back(fd);
      if (port == 0) port = c10d::local_port(fd);  // every host on the port the first one got
    }
    bound_port = port;
  } catch (...) {
    for (const int fd : fds) ::close(fd);
    throw;
  }
  spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  loop->call([&] {
    flusher = loop->after_batch([this] { flush_all(); });
    for (const int fd : fds) {
      auto l = std::make_unique<c10d::Listener>();
      l->fd = fd;
      l->s = this;
      loop->add(fd, EPOLLIN, l.get());
      listeners.push_back(std::move(l));
    }
  });
}

void C10dServer::Impl::shutdown() {
  if (stopped) return;
  stopped = true;
  for (auto& l : listeners) {
    loop->remove(l->fd);
    ::close(l->fd);
    loop->retire(std::move(l));
  }
  listeners.clear();
  while (!conns.empty()) close(*conns.begin()->second, "the worker store stopped", false);
  clear_keyspace();
  loop->remove_after_batch(flusher);
}

bool C10dServer::Impl::admitted(const sockaddr_storage& peer) const {
  if (!opts.filter_peers) return true;
  const std::string a = numeric_host_of(peer);
  if (opts.admit_local && (a.rfind("127.", 0) == 0 || a == "::1")) return true;
  return allowed.contains(a);
}

void C10dServer::Impl::accept_some(int lfd) {
  // Another thread of the process may have taken the spare's number while it was given up: try again.
  if (spare_fd < 0) spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  // Bounded per wake-up, so a connection storm does not starve the requests of those already in.
  for (int i = 0; i < 512; ++i) {
    sockaddr_storage peer{};
    socklen_t len = sizeof peer;
    const int fd = ::accept4(lfd, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) {
        // Out of descriptors: take the peer off the queue with the spare one and close it, or the
        // listener would stay readable and spin this thread.
        ++n_refused;
        if (spare_fd >= 0) {
          ::close(spare_fd);
          const int victim = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
          if (victim >= 0) ::close(victim);
          spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        }
        log_limited(fmt::format("worker store: out of file descriptors at {} connections; {}", conns.size(),
                                limit_advice()));
      }
      return;
    }
    if (!admitted(peer)) {
      ++n_refused;
      log_limited(
          fmt::format("worker store: refused {}: not an address of this job's nodes (docs/security.md)",
                      sockaddr_text(reinterpret_cast<const sockaddr*>(&peer))));
      c10d::close_reset(fd);
      continue;
    }
    if (conns.size() >= max_conns) {
      ++n_refused;
      log_limited(
          fmt::format("worker store: reached its connection limit of {}; {}", max_conns, limit_advice()));
      c10d::close_reset(fd);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    const std::uint64_t serial = ++next_serial;
    auto c = std::make_unique<SConn>(this, fd, serial, opts.limits, opts.legacy);
    c->peer = peer;
    SConn* raw = c.get();
    conns.emplace(serial, std::move(c));
    n_conns = conns.size();
    loop->add(fd, EPOLLIN | EPOLLRDHUP, raw);
  }
}

void C10dServer::Impl::on_conn(SConn& c, std::uint32_t events) {
  if (c.closed) return;
  if ((events & EPOLLERR) != 0) {
    close(c, "socket error", false);
    return;
  }
  if ((events & EPOLLOUT) != 0) flush(c);
  if (!c.closed && !c.paused && (events & (EPOLLIN | EPOLLHUP | EPOLLRDHUP)) != 0) read_some(c);
}

void C10dServer::Impl::read_some(SConn& c) {
  const ssize_t n = ::recv(c.fd, buf.data(), buf.size(), 0);
  if (n == 0) {
    close(c, "closed by peer", false);
    return;
  }
  if (n < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) close(c, std::strerror(errno), false);
    return;
  }
  process(c, std::string_view(buf.data(), static_cast<std::size_t>(n)));
}

void C10dServer::Impl::process(SConn& c, std::string_view data) {
  // Parse straight from the read when nothing is held over; keep only an incomplete tail.
  const bool held = c.in_off < c.in.size();
  if (held) c.in.append(data);
  std::string_view view = held ? std::string_view(c.in).substr(c.in_off) : data;
  try {
    while (!c.closed && !c.paused && view.size() >= c.parser.needed()) {
      auto q = c.parser.next(view);
      if (!q) break;
      ++n_requests;
      handle(c, *q);
      if (c.unsent() > opts.max_unsent) {
        c.paused = true;  // answers pile up: read nothing more until they drain
        set_interest(c);
      }
    }
  } catch (const Error& e) {
    close(c, e.what(), true);
    return;
  }
  if (c.closed) return;
  if (held) {
    c.in_off = c.in.size() - view.size();
    if (c.in_off == c.in.size()) {
      c.in.clear();
      c.in_off = 0;
    } else if (c.in_off > 4096 && c.in_off * 2 > c.in.size()) {
      c.in.erase(0, c.in_off);
      c.in_off = 0;
    }
  } else if (!view.empty()) {
    c.in.assign(view);
    c.in_off = 0;
  }
}

std::size_t C10dServer::Impl::begin(SConn& c, std::uint32_t tag) {
  if (!c.dirty) {
    c.dirty = true;
    dirty.push_back(&c);
  }
  return c.parser.relay() ? c10d::begin_tagged(c.out, tag) : c.out.size();
}

void C10dServer::Impl::end(SConn& c, std::size_t start) {
  if (c.parser.relay()) c10d::end_tagged(c.out, start);
}

void C10dServer::Impl::reply_u8(SConn& c, std::uint32_t tag, std::uint8_t v) {
  const auto at = begin(c, tag);
  c10d::put_u8(c.out, v);
  end(c, at);
}
void C10dServer::Impl::reply_i64(SConn& c, std::uint32_t tag, std::int64_t v) {
  const auto at = begin(c, tag);
  c10d::put_i64(c.out, v);
  end(c, at);
}
void C10dServer::Impl::reply_bytes(SConn& c, std::uint32_t tag, std::string_view v) {
  const auto at = begin(c, tag);
  c10d::put_bytes(c.out, v);
  end(c, at);
}

void C10dServer::Impl::handle(SConn& c, Request& q) {
  switch (q.op) {
    case Op::validate:
      if (q.u32 != c10d::kValidateMagic) refuse("VALIDATE with a wrong magic number");
      return;
    case Op::ping: {
      const auto at = begin(c, q.tag);
      c10d::put_u32(c.out, q.u32);
      end(c, at);
      return;
    }
    case Op::set:
      on_set(q.keys[0], q.values[0]);
      return;
    case Op::compare_set:
      on_compare_set(c, q);
      return;
    case Op::get: {
      const auto it = kv.find(q.keys[0]);
      reply_bytes(c, q.tag, it == kv.end() ? std::string_view() : std::string_view(it->second));
      return;
    }
    case Op::add:
      on_add(c, q);
      return;
    case Op::check:
      on_check(c, q);
      return;
    case Op::wait:
      on_wait(c, q);
      return;
    case Op::num_keys:
      reply_i64(c, q.tag, static_cast<std::int64_t>(kv.size()));
      return;
    case Op::watch_key:
      on_watch(c, q);
      return;
    case Op::delete_key:
      on_delete(c, q);
      return;
    case Op::append:
      on_append(q);
      return;
    case Op::multi_get:
      on_multi_get(c, q);
      return;
    case Op::multi_set:
      for (std::size_t i = 0; i < q.keys.size(); ++i) on_set(q.keys[i], q.values[i]);
      return;
    case Op::cancel_wait:
      on_cancel(c, q);
      return;
    case Op::queue_push:
      on_queue_push(q);
      return;
    case Op::queue_pop:
      on_queue_pop(c, q);
      return;
    case Op::queue_len: {
      const auto it = queues.find(q.keys[0]);
      reply_i64(c, q.tag, it == queues.end() ? 0 : static_cast<std::int64_t>(it->second.size()));
      return;
    }
    case Op::list:
      on_list(c, q);
      return;
  }
}

void C10dServer::Impl::account(std::ptrdiff_t delta) {
  if (delta > 0 && stored + static_cast<std::size_t>(delta) > opts.max_stored_bytes) {
    refuse(fmt::format("the store would hold more than {} bytes", opts.max_stored_bytes));
  }
  stored = static_cast<std::size_t>(static_cast<std::ptrdiff_t>(stored) + delta);
}

bool C10dServer::Impl::exists(const std::string& key) const {
  if (kv.contains(key)) return true;
  const auto q = queues.find(key);
  return q != queues.end() && !q->second.empty();
}

void C10dServer::Impl::on_set(std::string& key, std::string& value) {
  auto it = kv.find(key);
  if (it == kv.end()) {
    account(static_cast<std::ptrdiff_t>(key.size() + value.size()));
    if (!watchers.empty()) notify(key, c10d::WatchEvent::created, {}, value);
    it = kv.emplace(std::move(key), std::move(value)).first;
    n_keys = kv.size();
  } else {
    account(static_cast<std::ptrdiff_t>(value.size()) - static_cast<std::ptrdiff_t>(it->second.size()));
    if (!watchers.empty()) notify(it->first, c10d::WatchEvent::updated, it->second, value);
    it->second = std::move(value);
  }
  wake(it->first);
}

// The four cases of torch's servers. Waiters wake only when a value was written (libuv also wakes
// them when nothing changed, and 1.x's server not even on creation).
void C10dServer::Impl::on_compare_set(SConn& c, Request& q) {
  std::string& key = q.keys[0];
  std::string& expected = q.values[0];
  std::string& desired = q.values[1];
  auto it = kv.find(key);
  if (it == kv.end()) {
    if (!expected.empty()) {
      reply_bytes(c, q.tag, expected);  // missing, something expected: torch answers `expected`
      return;
    }
    reply_bytes(c, q.tag, desired);
    on_set(key, desired);
    return;
  }
  if (it->second != expected) {
    reply_bytes(c, q.tag, it->second);
    return;
  }
  reply_bytes(c, q.tag, desired);
  on_set(key, desired);
}

void C10dServer::Impl::on_add(SConn& c, Request& q) {
  std::string& key = q.keys[0];
  std::int64_t value = q.number;
  auto it = kv.find(key);
  if (it != kv.end()) {
    const auto old = parse_counter(it->second);
    if (!old) refuse(fmt::format("ADD to a key that holds no number ({} bytes)", it->second.size()));
    value = static_cast<std::int64_t>(static_cast<std::uint64_t>(*old) + static_cast<std::uint64_t>(value));
  }
  std::string text = std::to_string(value);
  reply_i64(c, q.tag, value);
  on_set(key, text);
}

void C10dServer::Impl::on_check(SConn& c, Request& q) {
  const bool ready =
      std::all_of(q.keys.begin(), q.keys.end(), [&](const std::string& k) { return exists(k); });
  reply_u8(c, q.tag, ready ? c10d::kReady : c10d::kNotReady);
}

// WAIT is answered when every key exists: at once, or by the write that creates the last one.
void C10dServer::Impl::on_wait(SConn& c, Request& q) {
  std::uint32_t missing = 0;
  for (const auto& k : q.keys) missing += exists(k) ? 0u : 1u;
  if (missing == 0) {
    reply_u8(c, q.tag, c10d::kStopWaiting);
    return;
  }
  if (c.waits.size() >= (c.parser.relay() ? kMaxRelayWaits : kMaxDirectWaits)) {
    refuse(fmt::format("more than {} WAITs pending on one connection", c.waits.size()));
  }
  // Ids of dropped waits count until swept: sweep them before refusing anyone.
  if (refs_total + missing > opts.max_waiting && refs_total > refs_live) compact_waiting();
  if (refs_total + missing > opts.max_waiting) {
    refuse(fmt::format("more than {} keys awaited in the whole store", opts.max_waiting));
  }
  const std::uint64_t id = ++next_wait;
  waits.emplace(id, Wait{c.serial, q.tag, missing});
  c.waits.push_back(id);
  for (auto& k : q.keys) {
    if (!exists(k)) waiting[std::move(k)].push_back(id);
  }
  refs_total += missing;
  refs_live += missing;
}

void C10dServer::Impl::finish_wait(std::uint64_t id) {
  const auto w = waits.find(id);
  const Wait wait = w->second;
  waits.erase(w);
  const auto it = conns.find(wait.conn);
  if (it == conns.end()) return;
  SConn& c = *it->second;
  std::erase(c.waits, id);
  reply_u8(c, wait.tag, c10d::kStopWaiting);
}

void C10dServer::Impl::wake(const std::string& key) {
  const auto it = waiting.find(key);
  if (it == waiting.end()) return;
  const std::vector<std::uint64_t> ids = std::move(it->second);
  waiting.erase(it);
  refs_total -= ids.size();
  for (const std::uint64_t id : ids) {
    const auto w = waits.find(id);
    if (w == waits.end()) continue;  // cancelled or its connection gone
    --refs_live;
    if (--w->second.remaining == 0) finish_wait(id);
  }
}

// QUEUE_PUSH: one value, so one waiter (the first still waiting) takes it.
void C10dServer::Impl::wake_one(const std::string& key) {
  const auto it = waiting.find(key);
  if (it == waiting.end()) return;
  auto& ids = it->second;
  std::size_t used = 0;
  while (used < ids.size()) {
    const std::uint64_t id = ids[used++];
    const auto w = waits.find(id);
    if (w == waits.end()) continue;
    --refs_live;
    if (--w->second.remaining == 0) {
      finish_wait(id);
      break;
    }
  }
  ids.erase(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(used));
  refs_total -= used;
  if (ids.empty()) waiting.erase(it);
}

void C10dServer::Impl::drop_waits(SConn& c) {
  for (const std::uint64_t id : c.waits) {
    const auto w = waits.find(id);
    if (w == waits.end()) continue;
    refs_live -= w->second.remaining;
    waits.erase(w);
  }
  c.waits.clear();
  // Their references stay in the key lists until a write or this sweep takes them out.
  if (refs_total > 2 * refs_live + 65536) compact_waiting();
}

void C10dServer::Impl::compact_waiting() {
  refs_total = 0;
  for (auto it = waiting.begin(); it != waiting.end();) {
    std::erase_if(it->second, [&](std::uint64_t id) { return !waits.contains(id); });
    refs_total += it->second.size();
    it = it->second.empty() ? waiting.erase(it) : std::next(it);
  }
}

// CANCEL_WAIT: a direct client's pending WAITs are dropped and WAIT_CANCELED always answered (a
// STOP_WAITING already sent comes before it, as the client expects). On a relay connection the
// tag names the one wait to drop, and the relay has already answered its worker.
void C10dServer::Impl::on_cancel(SConn& c, Request& q) {
  if (c.parser.relay()) {
    for (const std::uint64_t id : c.waits) {
      const auto w = waits.find(id);
      if (w != waits.end() && w->second.tag == q.tag) {
        refs_live -= w->second.remaining;
        waits.erase(w);
        std::erase(c.waits, id);
        break;
      }
    }
    return;
  }
  drop_waits(c);
  reply_u8(c, q.tag, c10d::kWaitCanceled);
}

void C10dServer::Impl::on_delete(SConn& c, Request& q) {
  const auto it = kv.find(q.keys[0]);
  if (it == kv.end()) {
    reply_i64(c, q.tag, 0);
    return;
  }
  if (!watchers.empty()) notify(it->first, c10d::WatchEvent::deleted, it->second, {});
  account(-static_cast<std::ptrdiff_t>(it->first.size() + it->second.size()));
  kv.erase(it);
  n_keys = kv.size();
  reply_i64(c, q.tag, 1);
}

void C10dServer::Impl::on_append(Request& q) {
  auto it = kv.find(q.keys[0]);
  if (it == kv.end()) {
    on_set(q.keys[0], q.values[0]);
    return;
  }
  account(static_cast<std::ptrdiff_t>(q.values[0].size()));
  if (!watchers.empty()) {
    std::string old = it->second;
    it->second += q.values[0];
    notify(it->first, c10d::WatchEvent::updated, old, it->second);
  } else {
    it->second += q.values[0];
  }
  wake(it->first);
}

void C10dServer::Impl::on_multi_get(SConn& c, Request& q) {
  std::size_t total = 0;
  for (const auto& k : q.keys) {
    const auto it = kv.find(k);
    total += 8 + (it == kv.end() ? 0 : it->second.size());
  }
  if (total > opts.max_reply) refuse(fmt::format("MULTI_GET answer over {} bytes", opts.max_reply));
  const auto at = begin(c, q.tag);
  for (const auto& k : q.keys) {
    const auto it = kv.find(k);
    c10d::put_bytes(c.out, it == kv.end() ? std::string_view() : std::string_view(it->second));
  }
  end(c, at);
}

void C10dServer::Impl::on_watch(SConn& c, Request& q) {
  const std::size_t cap = c.parser.relay() ? kMaxRelayWaits : kMaxWatches;
  if (c.watches >= cap) refuse(fmt::format("more than {} keys watched on one connection", cap));
  ++c.watches;
  watchers[q.keys[0]].emplace_back(c.serial, q.tag);
  reply_u8(c, q.tag, static_cast<std::uint8_t>(c10d::WatchEvent::registered));
}

void C10dServer::Impl::notify(const std::string& key, c10d::WatchEvent type, std::string_view old_value,
                              std::string_view new_value) {
  const auto it = watchers.find(key);
  if (it == watchers.end()) return;
  std::erase_if(it->second, [&](const std::pair<std::uint64_t, std::uint32_t>& w) {
    const auto conn = conns.find(w.first);
    if (conn == conns.end()) return true;
    SConn& c = *conn->second;
    const auto at = begin(c, w.second);
    c10d::put_watch_event(c.out, type, key, old_value, new_value);
    end(c, at);
    return false;
  });
  if (it->second.empty()) watchers.erase(it);
}

void C10dServer::Impl::on_queue_push(Request& q) {
  account(static_cast<std::ptrdiff_t>(q.values[0].size()));
  auto& queue = queues[q.keys[0]];
  queue.push_back(std::move(q.values[0]));
  wake_one(q.keys[0]);
}

void C10dServer::Impl::on_queue_pop(SConn& c, Request& q) {
  const auto it = queues.find(q.keys[0]);
  const std::size_t n = it == queues.end() ? 0 : it->second.size();
  const auto at = begin(c, q.tag);
  c10d::put_i64(c.out, static_cast<std::int64_t>(n));
  if (n > 0) {
    c10d::put_bytes(c.out, it->second.front());
    account(-static_cast<std::ptrdiff_t>(it->second.front().size()));
    it->second.pop_front();
    if (it->second.empty()) queues.erase(it);
  }
  end(c, at);
}

void C10dServer::Impl::on_list(SConn& c, Request& q) {
  std::size_t total = 8;
  for (const auto& [k, v] : kv) total += 8 + k.size();
  if (total > opts.max_reply) refuse(fmt::format("LIST answer over {} bytes", opts.max_reply));
  const auto at = begin(c, q.tag);
  c10d::put_i64(c.out, static_cast<std::int64_t>(kv.size()));
  for (const auto& [k, v] : kv) c10d::put_bytes(c.out, k);
  end(c, at);
}

void C10dServer::Impl::set_interest(SConn& c) {
  std::uint32_t ev = 0;
  if (!c.paused) ev |= EPOLLIN | EPOLLRDHUP;
  if (c.want_out) ev |= EPOLLOUT;
  loop->modify(c.fd, ev, &c);
}

void C10dServer::Impl::flush(SConn& c) {
  while (c.unsent() > 0) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.out_off, c.unsent(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      close(c, std::strerror(errno), false);
      return;
    }
    c.out_off += static_cast<std::size_t>(n);
  }
  const bool was_out = c.want_out;
  const bool was_paused = c.paused;
  if (c.unsent() == 0) {
    c.out.clear();
    c.out_off = 0;
    c.want_out = false;
  } else {
    c.want_out = true;
    if (c.out_off > (1u << 20) && c.out_off * 2 > c.out.size()) {
      c.out.erase(0, c.out_off);
      c.out_off = 0;
    }
  }
  if (c.paused && c.unsent() <= opts.max_unsent / 2) c.paused = false;
  if (was_out != c.want_out || was_paused != c.paused) set_interest(c);
  // Resumed: serve what was read before the pause.
  if (was_paused && !c.paused && c.in_off < c.in.size()) process(c, {});
}

void C10dServer::Impl::flush_all() {
  // flush() may add to `dirty` (a resumed connection's answers): index, not iterators.
  for (std::size_t i = 0; i < dirty.size(); ++i) {
    SConn* c = dirty[i];
    c->dirty = false;
    if (!c->closed) flush(*c);
  }
  dirty.clear();
}

void C10dServer::Impl::close(SConn& c, const std::string& reason, bool error) {
  if (c.closed) return;
  c.closed = true;
  drop_waits(c);
  loop->remove(c.fd);
  if (error) {
    ++n_dropped;
    log_limited(fmt::format("worker store: closed the connection of {}: {}",
                            sockaddr_text(reinterpret_cast<const sockaddr*>(&c.peer)), reason));
    ::close(c.fd);
  } else {
    c10d::close_reset(c.fd);  // nothing of ours is owed to a peer that went away
  }
  auto it = conns.find(c.serial);
  if (it != conns.end()) {
    loop->retire(std::move(it->second));
    conns.erase(it);
  }
  n_conns = conns.size();
}

void C10dServer::Impl::clear_keyspace() {
  kv.clear();
  queues.clear();
  waits.clear();
  waiting.clear();
  watchers.clear();
  refs_total = refs_live = 0;
  stored = 0;
  n_keys = 0;
}

std::string C10dServer::Impl::limit_advice() const {
  return fmt::format(
      "open-file limit RLIMIT_NOFILE {} (hard {}): raise it on node 0 (ulimit -n, limits.conf or Slurm's "
      "PropagateResourceLimits); each worker needs one descriptor",
      fd_limits.soft,
      fd_limits.hard == RLIM_INFINITY ? std::string("unlimited") : std::to_string(fd_limits.hard));
}

void C10dServer::Impl::log_line(const std::string& line) {
  if (opts.log) {
    opts.log(line);
  } else {
    std::fprintf(stderr, "ddprun: %s\n", line.c_str());
  }
}

void C10dServer::Impl::log_limited(const std::string& line) {
  if (!limiter.allow(auth::LogLimiter::Clock::now())) return;
  if (const auto skipped = limiter.take_suppressed()) {
    log_line(fmt::format("worker store: {} more such line(s) not shown", skipped));
  }
  log_line(line);
}

C10dServer::C10dServer(C10dServerOptions options) : impl_(std::make_shared<Impl>(std::move(options))) {
  impl_->start();
}

C10dServer::~C10dServer() {
  stop();
}

std::uint16_t C10dServer::port() const {
  return impl_->bound_port;
}

void C10dServer::reset() {
  Impl* s = impl_.get();
  s->loop->call([s] {
    while (!s->conns.empty()) s->close(*s->conns.begin()->second, "a new attempt", false);
    s->clear_keyspace();
  });
}

void C10dServer::allow_peers(const std::vector<std::string>& addresses) {
  Impl* s = impl_.get();
  s->loop->call([s, &addresses] {
    s->allowed.clear();
    if (s->opts.admit_local) {
      for (const auto& a : local_addresses()) s->allowed.insert(a);
    }
    for (const auto& a : addresses) s->allowed.insert(normalize_address(a));
  });
}

void C10dServer::stop() {
  if (!impl_) return;
  Impl* s = impl_.get();
  s->loop->call([s] { s->shutdown(); });
}

std::size_t C10dServer::connection_count() const {
  return impl_->n_conns;
}
std::uint64_t C10dServer::refused_count() const {
  return impl_->n_refused;
}
std::uint64_t C10dServer::dropped_count() const {
  return impl_->n_dropped;
}
std::size_t C10dServer::key_count() const {
  return impl_->n_keys;
}
std::uint64_t C10dServer::request_count() const {
  return impl_->n_requests;
}
std::size_t C10dServer::buffered_bytes() const {
  std::size_t n = 0;
  Impl* s = impl_.get();
  s->loop->call([s, &n] {
    for (const auto& [serial, c] : s->conns) n += c->in.size() + c->out.size();
  });
  return n;
}

}  // namespace ddprun::store
