// The node-local relay of --worker-store relay: this node's workers talk PyTorch's TCPStore protocol to
// it (any torch version, as to the server), and it forwards their requests to node 0's workers' store
// over one connection in the tagged form (docs/protocol.md, "Relays"). Node 0 then sees one connection
// per node instead of one per rank.
#include <fcntl.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <unordered_map>

#include <fmt/core.h>

#include "c10d_loop.hpp"
#include "c10d_net.hpp"
#include "store/c10d_server.hpp"
#include "store/error.hpp"
#include "store/limits.hpp"

namespace ddprun::store {

using c10d::Op;
using c10d::Request;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kReadChunk = 64 * 1024;
constexpr std::chrono::milliseconds kRetry{200};

// Ops whose answer node 0 sends back (the others are fire-and-forget in torch's protocol).
bool answered(Op op) {
  return op != Op::set && op != Op::append && op != Op::multi_set && op != Op::queue_push;
}
// Ops that change the store: a GET in flight is shared only with requests read before the next one.
bool writes(Op op) {
  return op == Op::set || op == Op::compare_set || op == Op::add || op == Op::delete_key ||
         op == Op::append || op == Op::multi_set || op == Op::queue_push || op == Op::queue_pop;
}

std::string coalesce_key(const Request& q) {
  std::string k(1, static_cast<char>(q.op));
  for (const auto& key : q.keys) c10d::put_bytes(k, key);
  return k;
}

}  // namespace

namespace c10d {
struct RConn;
}

struct C10dRelay::Impl {
  explicit Impl(C10dRelayOptions o);
  ~Impl();
  void start();
  void shutdown();

  void accept_some();
  void on_worker(c10d::RConn& w, std::uint32_t events);
  void process(c10d::RConn& w, std::string_view data);
  void handle(c10d::RConn& w, Request& q);
  void forward(c10d::RConn& w, Request& q);
  void detach_waits(c10d::RConn& w);
  void flush_worker(c10d::RConn& w);
  void set_interest(c10d::RConn& w);
  void mark(c10d::RConn& w);
  void close_worker(c10d::RConn& w, const std::string& reason, bool error);
  void flush_all();

  void connect_upstream();
  void on_upstream(std::uint32_t events);
  void upstream_replies();
  void flush_upstream();
  void upstream_failed(const std::string& why);
  void on_retry();
  void log_line(const std::string& line);

  struct Pending {
    Op op = Op::get;
    std::vector<std::uint64_t> workers;  // serials of the workers this answer goes to
    std::uint64_t epoch = 0;             // writes forwarded before it was sent
    std::string key;                     // its entry in `inflight`, when it may be shared
  };

  C10dRelayOptions opts;
  std::shared_ptr<C10dLoop> loop_owner;
  C10dLoop::Impl* loop = nullptr;
  std::uint64_t flusher = 0;
  std::unique_ptr<c10d::Handler> listener_h, upstream_h, retry_h;
  int listen_fd = -1;
  int retry_fd = -1;
  bool warned_fds = false;
  int spare_fd = -1;  // given up to accept-and-close a worker when descriptors run out
  std::uint16_t bound_port = 0;
  std::size_t max_conns = 0;
  bool stopped = false;

  std::unordered_map<std::uint64_t, std::unique_ptr<c10d::RConn>> workers;
  std::uint64_t next_serial = 0;
  std::vector<c10d::RConn*> dirty;
  std::array<char, kReadChunk> buf{};

  int up_fd = -1;
  bool up_ready = false;  // connected and opened
  bool up_dead = false;   // gave up: workers are refused
  bool up_dirty = false;
  std::uint32_t up_interest = 0;  // the events asked of epoll for up_fd
  std::optional<Clock::time_point> failing_since;
  std::string up_out;
  std::size_t up_out_off = 0;
  std::string up_in;
  std::size_t up_in_off = 0;
  std::unordered_map<std::uint32_t, Pending> pending;
  std::unordered_map<std::string, std::uint32_t> inflight;
  std::uint64_t epoch = 0;
  std::uint32_t next_tag = 0;

  std::atomic<std::size_t> n_conns{0};
  std::atomic<bool> a_connected{false};
  std::atomic<std::uint64_t> n_forwarded{0};
  std::atomic<std::uint64_t> n_requests{0};
};

namespace c10d {

struct RConn final : Handler {
  RConn(C10dRelay::Impl* r, int f, std::uint64_t sr, const Limits& l, Layout legacy)
      : s(r), fd(f), serial(sr), parser(l, legacy) {}
  void on_event(std::uint32_t events) override { s->on_worker(*this, events); }
  std::size_t unsent() const { return out.size() - out_off; }

  C10dRelay::Impl* s;
  int fd;
  std::uint64_t serial;
  Parser parser;
  std::string in;
  std::size_t in_off = 0;
  std::string out;
  std::size_t out_off = 0;
  std::vector<std::uint32_t> waits;  // tags of its pending WAITs
  bool dirty = false;
  bool want_out = false;
  bool paused = false;
  bool closed = false;
};

struct Fn final : Handler {
  explicit Fn(std::function<void(std::uint32_t)> f) : fn(std::move(f)) {}
  void on_event(std::uint32_t events) override { fn(events); }
  std::function<void(std::uint32_t)> fn;
};

}  // namespace c10d

using c10d::RConn;

C10dRelay::Impl::Impl(C10dRelayOptions o) : opts(std::move(o)) {
  loop_owner = opts.loop ? opts.loop : std::make_shared<C10dLoop>();
  loop = loop_owner->impl_.get();
  max_conns = opts.max_connections != 0 ? opts.max_connections : connection_cap(raise_fd_limit().soft);
  // The tagged opening; requests queue behind it until the connection is up.
  up_out.push_back(static_cast<char>(c10d::kRelayByte));
  c10d::put_u32(up_out, c10d::kRelayMagic);
}

C10dRelay::Impl::~Impl() = default;

void C10dRelay::Impl::start() {
  listen_fd = c10d::listen_on(opts.host, opts.port);
  bound_port = c10d::local_port(listen_fd);
  retry_fd = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  listener_h = std::make_unique<c10d::Fn>([this](std::uint32_t) { accept_some(); });
  upstream_h = std::make_unique<c10d::Fn>([this](std::uint32_t ev) { on_upstream(ev); });
  retry_h = std::make_unique<c10d::Fn>([this](std::uint32_t) { on_retry(); });
  loop->call([this] {
    flusher = loop->after_batch([this] { flush_all(); });
    loop->add(listen_fd, EPOLLIN, listener_h.get());
    if (retry_fd >= 0) loop->add(retry_fd, EPOLLIN, retry_h.get());
    connect_upstream();
  });
}

void C10dRelay::Impl::shutdown() {
  if (stopped) return;
  stopped = true;
  loop->remove(listen_fd);
  ::close(listen_fd);
  if (retry_fd >= 0) {
    loop->remove(retry_fd);
    ::close(retry_fd);
  }
  if (spare_fd >= 0) ::close(spare_fd);
  spare_fd = -1;
  while (!workers.empty()) close_worker(*workers.begin()->second, "the relay stopped", false);
  if (up_fd >= 0) {
    loop->remove(up_fd);
    c10d::close_reset(up_fd);
    up_fd = -1;
  }
  loop->remove_after_batch(flusher);
  loop->retire(std::move(listener_h));
  loop->retire(std::move(upstream_h));
  loop->retire(std::move(retry_h));
}

void C10dRelay::Impl::log_line(const std::string& line) {
  if (opts.log) {
    opts.log(line);
  } else {
    std::fprintf(stderr, "ddprun: %s\n", line.c_str());
  }
}

// ---- node 0's side ----

void C10dRelay::Impl::connect_upstream() {
  bool done = false;
  up_fd = c10d::start_connect(opts.upstream_host, opts.upstream_port, done, opts.source_host);
  if (up_fd < 0) {
    upstream_failed(std::strerror(errno));
    return;
  }
  loop->add(up_fd, EPOLLOUT, upstream_h.get());
  up_interest = EPOLLOUT;
  if (done) on_upstream(EPOLLOUT);
}

void C10dRelay::Impl::upstream_failed(const std::string& why) {
  if (up_fd >= 0) {
    loop->remove(up_fd);
    ::close(up_fd);
    up_fd = -1;
  }
  const auto now = Clock::now();
  if (up_ready || (failing_since && now - *failing_since > opts.connect_timeout) || retry_fd < 0) {
    // Lost after it was up (node 0's store is gone: the attempt is over), or never reached in time.
    // Lost with no worker connected, it is no news: this node's workers have ended, and node 0 closed its
    // store for the next attempt's round or at the job's end.
    up_dead = true;
    a_connected = false;
    if (!up_ready || !workers.empty()) {
      log_line(fmt::format("worker store relay: {} node 0's store at {}:{}: {}",
                           up_ready ? "lost" : "cannot reach", opts.upstream_host, opts.upstream_port, why));
    }
    up_ready = false;
    while (!workers.empty()) close_worker(*workers.begin()->second, "node 0's store is gone", false);
    return;
  }
  if (!failing_since) failing_since = now;
  itimerspec t{};
  t.it_value.tv_nsec = std::chrono::duration_cast<std::chrono::nanoseconds>(kRetry).count();
  ::timerfd_settime(retry_fd, 0, &t, nullptr);
}

void C10dRelay::Impl::on_retry() {
  std::uint64_t n = 0;
  [[maybe_unused]] const auto r = ::read(retry_fd, &n, sizeof n);
  if (!stopped && !up_dead && up_fd < 0) connect_upstream();
}

void C10dRelay::Impl::on_upstream(std::uint32_t events) {
  if (up_fd < 0) return;
  if (!up_ready) {
    const int err = c10d::connect_result(up_fd);
    if (err != 0) {
      upstream_failed(std::strerror(err));
      return;
    }
    up_ready = true;
    a_connected = true;
    failing_since.reset();
    up_dirty = true;  // the opening and what queued behind it
  }
  if ((events & EPOLLERR) != 0) {
    upstream_failed(std::strerror(c10d::connect_result(up_fd)));
    return;
  }
  if ((events & (EPOLLIN | EPOLLHUP | EPOLLRDHUP)) != 0) {
    const ssize_t n = ::recv(up_fd, buf.data(), buf.size(), 0);
    if (n == 0) {
      upstream_failed("closed by node 0");
      return;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      upstream_failed(std::strerror(errno));
      return;
    }
    if (n > 0) {
      up_in.append(buf.data(), static_cast<std::size_t>(n));
      upstream_replies();
    }
  }
  if ((events & EPOLLOUT) != 0) up_dirty = true;
}

// Answers from node 0: u32 tag, u32 length, the answer as a direct client gets it.
void C10dRelay::Impl::upstream_replies() {
  std::string_view in(up_in);
  in.remove_prefix(up_in_off);
  while (in.size() >= c10d::kTaggedHeader) {
    const std::uint32_t tag = c10d::get_u32(in, 0);
    const std::uint32_t len = c10d::get_u32(in, 4);
    if (in.size() < c10d::kTaggedHeader + len) break;
    const std::string_view body = in.substr(c10d::kTaggedHeader, len);
    const auto it = pending.find(tag);
    if (it != pending.end()) {
      Pending& p = it->second;
      for (const std::uint64_t serial : p.workers) {
        const auto w = workers.find(serial);
        if (w == workers.end()) continue;
        RConn& c = *w->second;
        c.out.append(body);
        mark(c);
        if (p.op == Op::wait) std::erase(c.waits, tag);
      }
      if (p.op != Op::watch_key) {  // a watch's events keep coming under its tag
        if (!p.key.empty()) {
          const auto f = inflight.find(p.key);
          if (f != inflight.end() && f->second == tag) inflight.erase(f);
        }
        pending.erase(it);
      }
    }
    in.remove_prefix(c10d::kTaggedHeader + len);
  }
  up_in_off = up_in.size() - in.size();
  if (up_in_off == up_in.size()) {
    up_in.clear();
    up_in_off = 0;
  } else if (up_in_off > 65536) {
    up_in.erase(0, up_in_off);
    up_in_off = 0;
  }
}

void C10dRelay::Impl::flush_upstream() {
  if (up_fd < 0 || !up_ready) return;
  while (up_out_off < up_out.size()) {
    const ssize_t n = ::send(up_fd, up_out.data() + up_out_off, up_out.size() - up_out_off, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      upstream_failed(std::strerror(errno));
      return;
    }
    up_out_off += static_cast<std::size_t>(n);
  }
  if (up_out_off == up_out.size()) {
    up_out.clear();
    up_out_off = 0;
  } else if (up_out_off > (1u << 20)) {
    up_out.erase(0, up_out_off);
    up_out_off = 0;
  }
  const std::uint32_t interest = EPOLLIN | EPOLLRDHUP | (up_out_off < up_out.size() ? EPOLLOUT : 0u);
  if (interest != up_interest) {
    up_interest = interest;
    loop->modify(up_fd, interest, upstream_h.get());
  }
}

// ---- the workers' side ----

void C10dRelay::Impl::accept_some() {
  // Another thread of the process may have taken the spare's number while it was given up: try again.
  if (spare_fd < 0) spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  for (int i = 0; i < 512; ++i) {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors: take the worker off the queue with the spare one and close it, or the
      // listener would stay readable and spin the loop (every relay sharing it with this one).
      if ((errno == EMFILE || errno == ENFILE) && spare_fd >= 0) {
        ::close(spare_fd);
        const int victim = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (victim >= 0) ::close(victim);
        spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (!warned_fds && opts.log) {
          warned_fds = true;
          opts.log(
              fmt::format("worker store relay: out of file descriptors at {} workers; raise RLIMIT_NOFILE "
                          "on this node (ulimit -n)",
                          workers.size()));
        }
      }
      return;
    }
    if (up_dead || workers.size() >= max_conns) {
      c10d::close_reset(fd);
      continue;
    }
    const std::uint64_t serial = ++next_serial;
    auto w = std::make_unique<RConn>(this, fd, serial, opts.limits, opts.legacy);
    RConn* raw = w.get();
    workers.emplace(serial, std::move(w));
    n_conns = workers.size();
    loop->add(fd, EPOLLIN | EPOLLRDHUP, raw);
  }
}

void C10dRelay::Impl::on_worker(RConn& w, std::uint32_t events) {
  if (w.closed) return;
  if ((events & EPOLLERR) != 0) {
    close_worker(w, "socket error", false);
    return;
  }
  if ((events & EPOLLOUT) != 0) flush_worker(w);
  if (w.closed || w.paused || (events & (EPOLLIN | EPOLLHUP | EPOLLRDHUP)) == 0) return;
  const ssize_t n = ::recv(w.fd, buf.data(), buf.size(), 0);
  if (n == 0) {
    close_worker(w, "closed by peer", false);
    return;
  }
  if (n < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      close_worker(w, std::strerror(errno), false);
    return;
  }
  process(w, std::string_view(buf.data(), static_cast<std::size_t>(n)));
}

void C10dRelay::Impl::process(RConn& w, std::string_view data) {
  const bool held = w.in_off < w.in.size();
  if (held) w.in.append(data);
  std::string_view view = held ? std::string_view(w.in).substr(w.in_off) : data;
  try {
    while (!w.closed && !w.paused && view.size() >= w.parser.needed()) {
      auto q = w.parser.next(view);
      if (!q) break;
      ++n_requests;
      handle(w, *q);
      if (w.unsent() > opts.max_unsent) {
        w.paused = true;
        set_interest(w);
      }
    }
  } catch (const Error& e) {
    close_worker(w, e.what(), true);
    return;
  }
  if (w.closed) return;
  if (held) {
    w.in_off = w.in.size() - view.size();
    if (w.in_off == w.in.size()) {
      w.in.clear();
      w.in_off = 0;
    }
  } else if (!view.empty()) {
    w.in.assign(view);
    w.in_off = 0;
  }
}

void C10dRelay::Impl::handle(RConn& w, Request& q) {
  switch (q.op) {
    case Op::validate:
      if (q.u32 != c10d::kValidateMagic) {
        throw Error(Error::Kind::protocol, "worker store relay: VALIDATE with a wrong magic number", "c10d");
      }
      return;
    case Op::ping:
      c10d::put_u32(w.out, q.u32);
      mark(w);
      return;
    case Op::cancel_wait:
      detach_waits(w);
      c10d::put_u8(w.out, c10d::kWaitCanceled);
      mark(w);
      return;
    default:
      forward(w, q);
  }
}

// Drops the worker's pending WAITs; a wait no other worker shares is cancelled on node 0 too.
void C10dRelay::Impl::detach_waits(RConn& w) {
  for (const std::uint32_t tag : w.waits) {
    const auto it = pending.find(tag);
    if (it == pending.end()) continue;
    std::erase(it->second.workers, w.serial);
    if (!it->second.workers.empty()) continue;
    if (!it->second.key.empty()) inflight.erase(it->second.key);
    pending.erase(it);
    Request cancel;
    cancel.op = Op::cancel_wait;
    cancel.tag = tag;
    up_out += c10d::encode_tagged(cancel);
    up_dirty = true;
  }
  w.waits.clear();
}

void C10dRelay::Impl::forward(RConn& w, Request& q) {
  // Identical WAITs share one on node 0 (a wait's answer only says the keys exist); identical GETs
  // share one sent since the last write this relay forwarded, so no worker reads older than its own write.
  std::string key;
  if (q.op == Op::wait || q.op == Op::get) {
    key = coalesce_key(q);
    const auto f = inflight.find(key);
    if (f != inflight.end()) {
      Pending& p = pending.at(f->second);
      if (q.op == Op::wait || p.epoch == epoch) {
        p.workers.push_back(w.serial);
        if (q.op == Op::wait) w.waits.push_back(f->second);
        return;
      }
    }
  }
  if (up_out.size() - up_out_off > opts.max_upstream) {
    throw Error(
        Error::Kind::protocol,
        fmt::format("worker store relay: more than {} bytes wait for node 0's socket", opts.max_upstream),
        "c10d");
  }
  do {
    ++next_tag;
  } while (next_tag == 0 || pending.contains(next_tag));
  q.tag = next_tag;
  if (answered(q.op)) {
    Pending p;
    p.op = q.op;
    p.workers.push_back(w.serial);
    p.epoch = epoch;
    if (!key.empty()) {
      p.key = key;
      inflight[key] = q.tag;
    }
    pending.emplace(q.tag, std::move(p));
    if (q.op == Op::wait) w.waits.push_back(q.tag);
  }
  if (writes(q.op)) ++epoch;
  up_out += c10d::encode_tagged(q);
  up_dirty = true;
  ++n_forwarded;
}

void C10dRelay::Impl::mark(RConn& w) {
  if (!w.dirty) {
    w.dirty = true;
    dirty.push_back(&w);
  }
}

void C10dRelay::Impl::set_interest(RConn& w) {
  std::uint32_t ev = 0;
  if (!w.paused) ev |= EPOLLIN | EPOLLRDHUP;
  if (w.want_out) ev |= EPOLLOUT;
  loop->modify(w.fd, ev, &w);
}

void C10dRelay::Impl::flush_worker(RConn& w) {
  while (w.unsent() > 0) {
    const ssize_t n = ::send(w.fd, w.out.data() + w.out_off, w.unsent(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      close_worker(w, std::strerror(errno), false);
      return;
    }
    w.out_off += static_cast<std::size_t>(n);
  }
  const bool was_out = w.want_out;
  const bool was_paused = w.paused;
  if (w.unsent() == 0) {
    w.out.clear();
    w.out_off = 0;
    w.want_out = false;
  } else {
    w.want_out = true;
  }
  if (w.paused && w.unsent() <= opts.max_unsent / 2) w.paused = false;
  if (was_out != w.want_out || was_paused != w.paused) set_interest(w);
  if (was_paused && !w.paused && w.in_off < w.in.size()) process(w, {});
}

void C10dRelay::Impl::flush_all() {
  for (std::size_t i = 0; i < dirty.size(); ++i) {
    RConn* w = dirty[i];
    w->dirty = false;
    if (!w->closed) flush_worker(*w);
  }
  dirty.clear();
  if (up_dirty) {
    up_dirty = false;
    flush_upstream();
  }
}

void C10dRelay::Impl::close_worker(RConn& w, const std::string& reason, bool error) {
  if (w.closed) return;
  w.closed = true;
  detach_waits(w);
  loop->remove(w.fd);
  if (error) {
    log_line(fmt::format("worker store relay: closed a worker's connection: {}", reason));
    ::close(w.fd);
  } else {
    c10d::close_reset(w.fd);
  }
  const auto it = workers.find(w.serial);
  if (it != workers.end()) {
    loop->retire(std::move(it->second));
    workers.erase(it);
  }
  n_conns = workers.size();
}

C10dRelay::C10dRelay(C10dRelayOptions options) : impl_(std::make_shared<Impl>(std::move(options))) {
  impl_->start();
}

C10dRelay::~C10dRelay() {
  stop();
}

std::uint16_t C10dRelay::port() const {
  return impl_->bound_port;
}

void C10dRelay::stop() {
  if (!impl_) return;
  Impl* s = impl_.get();
  s->loop->call([s] { s->shutdown(); });
}

std::size_t C10dRelay::connection_count() const {
  return impl_->n_conns;
}
bool C10dRelay::upstream_connected() const {
  return impl_->a_connected;
}
std::uint64_t C10dRelay::forwarded_count() const {
  return impl_->n_forwarded;
}
std::uint64_t C10dRelay::request_count() const {
  return impl_->n_requests;
}

}  // namespace ddprun::store
