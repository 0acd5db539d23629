#include "store/server.hpp"

#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <future>
#include <iostream>
#include <span>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <fmt/core.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "store/answer.hpp"
#include "store/error.hpp"
#include "store/sockaddr.hpp"
#include "store/store.hpp"

namespace ddprun::rdzv {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
constexpr auto use_nothrow = asio::as_tuple(asio::use_awaitable);
constexpr std::size_t kMaxQueuedAnswers = 8;
constexpr std::size_t kConnBuffer = 1024;     // per connection; most requests fit
constexpr std::size_t kMaxBatch = 64 * 1024;  // answers to one read sent in one write, up to this

struct Waiter {
  Waiter(asio::any_io_executor ex, proto::Request q) : request(std::move(q)), timer(std::move(ex)) {}
  proto::Request request;
  std::string fired_by;  // the key whose write satisfied it; empty on timeout
  asio::steady_timer timer;
};

struct Conn {
  explicit Conn(tcp::socket s) : sock(std::move(s)), watchdog(sock.get_executor()) {}
  tcp::socket sock;
  asio::steady_timer watchdog;
  Clock::time_point deadline = Clock::time_point::max();
  std::string label;
  sockaddr_storage peer_addr{};  // for the rejected-peer log line
  std::chrono::milliseconds liveness{0};
  bool open = true;
  bool hello_done = false;
  bool busy = false;  // a request is being served; the protocol allows one at a time
  bool writing = false;
  bool close_after_write = false;
  std::string close_reason;
  std::deque<std::string> outq;
  // While the frames of one read are served, their answers collect here and go out in one write.
  bool batching = false;
  std::string batch;
  std::shared_ptr<Waiter> waiter;
};
using ConnPtr = std::shared_ptr<Conn>;

// The keys a blocked get/wait/wait_any waits on.
std::span<const std::string> waited_keys(const proto::Request& q) {
  if (q.op == proto::Op::get) return {&q.key, 1};
  return q.keys;
}

tcp::endpoint listen_endpoint(const std::string& host, std::uint16_t port) {
  boost::system::error_code ec;
  const std::string h = host.empty() ? "0.0.0.0" : host;
  auto addr = asio::ip::make_address(h, ec);
  if (!ec) return {addr, port};
  asio::io_context tmp;
  tcp::resolver r(tmp);
  auto results = r.resolve(h, std::to_string(port), ec);
  if (ec || results.empty()) {
    throw Error(Error::Kind::io,
                fmt::format("cannot serve the rendezvous store on {}:{}: cannot resolve '{}': {}", h, port, h,
                            ec ? ec.message() : "no address"),
                "listen", fmt::format("{}:{}", h, port));
  }
  return results.begin()->endpoint();
}

}  // namespace

struct StoreServer::Impl {
  explicit Impl(ServerOptions o) : opts(std::move(o)), acceptor(io), verifier(opts.auth, opts.run_id) {}

  ServerOptions opts;
  asio::io_context io{1};
  std::array<char, 65536> read_buf{};  // shared by every connection: reads happen on this thread only
  tcp::acceptor acceptor;
  std::uint16_t bound_port = 0;
  StoreData data;
  std::unordered_map<std::string, std::vector<std::shared_ptr<Waiter>>> waiters;
  std::size_t waiter_count = 0;
  std::unordered_set<ConnPtr> conns;
  std::atomic<std::size_t> n_conns{0};
  std::atomic<std::uint64_t> n_dropped{0};
  std::atomic<std::uint64_t> n_refused{0};
  auth::Verifier verifier;
  // A port scan or a misconfigured job must not flood the master's stderr.
  auth::LogLimiter log_limit{5, std::chrono::seconds(10)};
  bool stopping = false;
  std::atomic<bool> stopped{false};
  std::thread thread;

  void listen() {
    const tcp::endpoint ep = listen_endpoint(opts.host, opts.port);
    const std::string where = fmt::format("{}:{}", ep.address().to_string(), ep.port());
    // Opened by hand so the listener is close-on-exec from birth (Asio 1.81 does not ask for it).
    const int fd = ::socket(ep.protocol().family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      throw Error(
          Error::Kind::io,
          fmt::format("cannot serve the rendezvous store on {}: socket: {}", where, std::strerror(errno)),
          "listen", where);
    }
    boost::system::error_code ec;
    acceptor.assign(ep.protocol(), fd, ec);
    if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    // Accepted sockets inherit both from the listener (Linux): two syscalls less per agent.
    if (!ec) acceptor.set_option(tcp::no_delay(true), ec);
    if (!ec) acceptor.set_option(asio::socket_base::keep_alive(true), ec);
    if (!ec) acceptor.bind(ep, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (!ec) acceptor.non_blocking(true, ec);
    if (ec) {
      boost::system::error_code ignored;
      acceptor.close(ignored);
      throw Error(Error::Kind::io,
                  fmt::format("cannot serve the rendezvous store on {}: {}; free the port or "
                              "choose another one (--rdzv-endpoint HOST:PORT)",
                              where, ec.message()),
                  "listen", where);
    }
    bound_port = acceptor.local_endpoint().port();
  }

  // ---- accepting

  asio::awaitable<void> accept_loop() {
    for (;;) {
      auto [ec] = co_await acceptor.async_wait(tcp::acceptor::wait_read, use_nothrow);
      if (stopping || !acceptor.is_open()) co_return;
      if (ec) continue;
      // Drain the backlog in one go; accept4 makes each socket close-on-exec atomically.
      for (;;) {
        sockaddr_storage ss{};
        socklen_t len = sizeof ss;
        const int fd = ::accept4(acceptor.native_handle(), reinterpret_cast<sockaddr*>(&ss), &len,
                                 SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
          if (errno == EINTR || errno == ECONNABORTED) continue;
          if (errno == EMFILE || errno == ENFILE) {
            // Out of descriptors: back off briefly instead of spinning on a readable listener.
            asio::steady_timer t(io, std::chrono::milliseconds(20));
            co_await t.async_wait(use_nothrow);
          }
          break;
        }
        if (conns.size() >= opts.max_connections) {
          ::close(fd);
          ++n_refused;
          continue;
        }
        tcp::socket s(io);
        boost::system::error_code aec;
        s.assign(ss.ss_family == AF_INET6 ? tcp::v6() : tcp::v4(), fd, aec);
        if (aec) {
          ::close(fd);
          continue;
        }
        // The descriptor is non-blocking (accept4), and the fast paths below call recv/send with
        // MSG_DONTWAIT themselves: one peer that does not read can never stall the server.
        auto c = std::make_shared<Conn>(std::move(s));
        c->peer_addr = ss;  // formatted only if a rejection is logged
        c->deadline = Clock::now() + opts.handshake_timeout;
        conns.insert(c);
        n_conns = conns.size();
        asio::co_spawn(io, session(c), asio::detached);
        arm_watchdog(c);
      }
    }
  }

  // ---- per connection

  // One timer per connection, armed only while it has a deadline (the handshake, a liveness
  // promise, an idle timeout); a plain handler, not a coroutine: 1000s of agents connect at once.
  void arm_watchdog(const ConnPtr& c) {
    if (!c->open || c->deadline == Clock::time_point::max()) return;
    c->watchdog.expires_at(c->deadline);
    c->watchdog.async_wait([this, c](const boost::system::error_code&) { on_watchdog(c); });
  }

  void on_watchdog(const ConnPtr& c) {
    if (!c->open) return;
    if (Clock::now() < c->deadline) {
      arm_watchdog(c);  // the deadline moved (a request arrived, or the handshake ended)
      return;
    }
    ++n_dropped;
    if (!c->hello_done) {
      close(c, fmt::format("no handshake within {} ms", opts.handshake_timeout.count()));
    } else if (c->liveness.count() > 0) {
      close(c, fmt::format("no heartbeat for {} ms", c->liveness.count()));
    } else {
      close(c, fmt::format("idle for {} ms", opts.idle_timeout.count()));
    }
  }

  void touch(Conn& c) {
    if (c.liveness.count() > 0) {
      c.deadline = Clock::now() + c.liveness;
    } else if (opts.idle_timeout.count() > 0) {
      c.deadline = Clock::now() + opts.idle_timeout;
    } else {
      c.deadline = Clock::time_point::max();
    }
  }

  // Each connection reads into a small buffer of its own (Asio tries the read before waiting, so
  // a request that is already there costs no epoll round); when that fills, the rest is read at
  // once into the server's one large buffer. Thousands of idle agents cost the server little.
  asio::awaitable<void> session(ConnPtr c) {
    proto::FrameParser parser(proto::kMaxHelloSize);
    const auto small = std::make_unique_for_overwrite<char[]>(kConnBuffer);
    try {
      while (c->open) {
        auto [ec, n] = co_await c->sock.async_read_some(asio::buffer(small.get(), kConnBuffer), use_nothrow);
        if (!c->open) co_return;
        boost::system::error_code end = ec;  // set once the peer is gone
        if (!end) parser.feed(std::string_view(small.get(), n));
        // Bounded, so a peer that streams requests cannot keep the server to itself.
        for (int rounds = 0; !end && n == kConnBuffer && rounds < 16; ++rounds) {
          const ssize_t got = ::recv(c->sock.native_handle(), read_buf.data(), read_buf.size(), MSG_DONTWAIT);
          if (got > 0) {
            parser.feed(std::string_view(read_buf.data(), static_cast<std::size_t>(got)));
            if (static_cast<std::size_t>(got) < read_buf.size()) break;  // drained
            continue;
          }
          if (got == 0) {
            end = asio::error::eof;
          } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            end.assign(errno, boost::system::system_category());
          }
          break;
        }
        c->batching = true;
        while (c->open && !c->close_after_write) {
          auto payload = parser.next();
          if (!payload) break;
          if (!c->hello_done) {
            handshake(c, *payload);
            parser.set_max(opts.limits.max_message);
          } else {
            handle(c, proto::decode_request(*payload, opts.limits));
          }
        }
        c->batching = false;
        if (!c->batch.empty()) send(c, std::exchange(c->batch, {}));
        if (end) {
          // After an orderly close with every answer out, a reset is safe (see nothing_unsent).
          const bool clean = end == asio::error::eof;
          close(c, peer_gone_reason(end),
                clean && nothing_unsent(*c) ? Closing::abortive : Closing::peer_gone);
          co_return;
        }
      }
    } catch (const std::exception& e) {
      // Garbage, absurd lengths, HTTP, pipelined requests: this peer goes, nobody else notices.
      ++n_dropped;
      close(c, e.what());
    }
  }

  static std::string peer_gone_reason(const boost::system::error_code& ec) {
    if (ec == asio::error::eof) return "connection closed by peer";
    // ddprun's client resets once it has read everything.
    if (ec == asio::error::connection_reset) return "connection closed by peer (reset)";
    return ec.message();
  }

  // After the peer's orderly close, a reset instead of our FIN is safe when every answer has left
  // (nothing queued here, nothing unacknowledged in the kernel), and it spares both sides the
  // FIN/ACK exchange: a third of the server's time when thousands of agents leave at once.
  static bool nothing_unsent(Conn& c) {
    if (c.writing || !c.outq.empty()) return false;
    int unsent = 0;
    return ::ioctl(c.sock.native_handle(), SIOCOUTQ, &unsent) == 0 && unsent == 0;
  }

  void handshake(const ConnPtr& c, const std::string& payload) {
    const proto::Hello h = proto::decode_hello(payload, opts.limits);
    auto refuse = [&](std::string why) {
      ++n_refused;
      log_rejection(*c, h.label, why);
      c->close_after_write = true;
      c->close_reason = why;
      send(c, proto::encode_response({proto::Status::error, 0, std::move(why)}));
    };
    if (h.version != proto::kVersion) {
      refuse(
          fmt::format("protocol version {} is not supported (this store speaks version {}); "
                      "use the same ddprun on every node",
                      h.version, proto::kVersion));
      return;
    }
    if (h.run_id != opts.run_id) {
      refuse(
          fmt::format("run id mismatch: this store serves run '{}', the client belongs to "
                      "run '{}'; check --rdzv-id / SLURM_JOB_ID and the endpoint",
                      opts.run_id, h.run_id));
      return;
    }
    const auto mode = auth::mode_from_wire(h.auth);
    if (!mode) {
      refuse(fmt::format("unknown authentication mode {}", h.auth));
      return;
    }
    if (auto why = verifier.check(*mode, h.credential, h.label)) {
      refuse(std::move(*why));
      return;
    }
    c->hello_done = true;
    c->label = h.label;
    c->liveness = std::chrono::milliseconds(h.liveness_ms);
    touch(*c);
    c->watchdog.cancel();  // its handler re-arms at the new deadline, if there is one
    send(c, proto::encode_response({proto::Status::ok, proto::kVersion, {}}));
  }

  void log_rejection(const Conn& c, const std::string& label, const std::string& why) {
    if (!log_limit.allow(Clock::now())) return;
    const std::uint64_t skipped = log_limit.take_suppressed();
    std::string line =
        fmt::format("ddprun: rendezvous store: rejected peer {}{}: {}{}",
                    sockaddr_text(reinterpret_cast<const sockaddr*>(&c.peer_addr)),
                    label.empty() ? std::string() : fmt::format(" ('{}')", label), why,
                    skipped ? fmt::format(" ({} more rejection(s) not shown)", skipped) : std::string());
    // Label and run id come from an unauthenticated peer: no control characters into our log.
    for (char& ch : line) {
      if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
    }
    if (opts.log) {
      opts.log(line);
    } else {
      std::cerr << line << '\n' << std::flush;
    }
  }

  void handle(const ConnPtr& c, proto::Request q) {
    if (c->busy) {
      throw Error(Error::Kind::protocol, "protocol error: a request arrived while another was pending");
    }
    touch(*c);
    if (must_wait(data, q)) {
      block(c, std::move(q));
      return;
    }
    Answer a = answer(data, std::move(q));
    if (a.changed) notify(*a.changed);
    send(c, proto::encode_response(a.reply));
  }

  // ---- blocking requests: a timer per waiter, cancelled by the write that satisfies it

  // Fired waiters leave this key's list here, in one pass: 1000s of agents waiting on one key
  // must not each search the list when they wake.
  void notify(const std::string& key) {
    auto it = waiters.find(key);
    if (it == waiters.end()) return;
    std::vector<std::shared_ptr<Waiter>> fired;
    std::erase_if(it->second, [&](const std::shared_ptr<Waiter>& w) {
      if (!ready(data, w->request)) return false;
      fired.push_back(w);
      return true;
    });
    if (it->second.empty()) waiters.erase(it);
    for (const auto& w : fired) {
      w->fired_by = key;
      w->timer.cancel();
    }
  }

  void block(const ConnPtr& c, proto::Request q) {
    if (waiter_count >= opts.max_waiters) {
      send(c, proto::encode_response(
                  {proto::Status::error, 0,
                   fmt::format("too many blocked requests on the store (limit {})", opts.max_waiters)}));
      return;
    }
    c->busy = true;
    asio::co_spawn(io, wait_for(c, std::move(q)), asio::detached);
  }

  asio::awaitable<void> wait_for(ConnPtr c, proto::Request q) {
    const auto timeout = std::chrono::milliseconds(
        static_cast<std::int64_t>(std::min<std::uint64_t>(q.timeout_ms, 1ULL << 40)));
    auto w = std::make_shared<Waiter>(io.get_executor(), std::move(q));
    for (const auto& k : waited_keys(w->request)) waiters[k].push_back(w);
    ++waiter_count;
    c->waiter = w;
    w->timer.expires_after(clamp_timeout(timeout));
    co_await w->timer.async_wait(use_nothrow);

    for (const auto& k : waited_keys(w->request)) {
      if (k == w->fired_by) continue;  // notify() took it off that list already
      auto it = waiters.find(k);
      if (it == waiters.end()) continue;
      std::erase(it->second, w);
      if (it->second.empty()) waiters.erase(it);
    }
    --waiter_count;
    c->waiter.reset();
    c->busy = false;
    if (!c->open) co_return;
    // Woken or timed out, the reply is what the data says now.
    send(c, proto::encode_response(answer(data, std::move(w->request)).reply));
  }

  // ---- writing: try the socket directly, queue the rest behind one writer

  void send(const ConnPtr& c, std::string frame) {
    if (!c->open) return;
    if (c->batching) {
      if (c->batch.size() + frame.size() <= kMaxBatch) {
        c->batch += frame;
        return;
      }
      // Large answers go out one by one, so the cap on queued answers below still bites.
      c->batching = false;
      if (!c->batch.empty()) send(c, std::exchange(c->batch, {}));
      send(c, std::move(frame));
      c->batching = true;
      return;
    }
    if (!c->writing) {
      const ssize_t n =
          ::send(c->sock.native_handle(), frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n == static_cast<ssize_t>(frame.size())) {
        if (c->close_after_write) close(c, c->close_reason);
        return;
      }
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        close(c, std::strerror(errno));
        return;
      }
      frame.erase(0, n > 0 ? static_cast<std::size_t>(n) : 0);
    }
    // Writes the kernel could not take pile up here only for a peer that sends without reading:
    // drop it before its answers eat the server's memory.
    if (c->outq.size() >= kMaxQueuedAnswers) {
      ++n_dropped;
      // Abortive (RST): what is queued for it in the kernel is thrown away too.
      close(c, "peer sends requests without reading the answers", Closing::abortive);
      return;
    }
    c->outq.push_back(std::move(frame));
    if (!c->writing) {
      c->writing = true;
      asio::co_spawn(io, write_loop(c), asio::detached);
    }
  }

  asio::awaitable<void> write_loop(ConnPtr c) {
    while (c->open && !c->outq.empty()) {
      auto [ec, n] = co_await asio::async_write(c->sock, asio::buffer(c->outq.front()), use_nothrow);
      if (ec) {
        close(c, ec.message());
        break;
      }
      c->outq.pop_front();
    }
    c->writing = false;
    if (c->open && c->close_after_write) close(c, c->close_reason);
  }

  // graceful: FIN after what is queued; abortive: reset, queued data dropped; peer_gone: the peer
  // closed or reset, so a plain close() (a shutdown would be a syscall for nothing).
  enum class Closing { graceful, abortive, peer_gone };

  void close(const ConnPtr& c, const std::string& reason, Closing how = Closing::graceful) {
    if (!c->open) return;
    c->open = false;
    boost::system::error_code ignored;
    if (how == Closing::abortive) {
      c->sock.set_option(asio::socket_base::linger(true, 0), ignored);  // close() sends a reset
    } else if (how == Closing::graceful) {
      c->sock.shutdown(tcp::socket::shutdown_both, ignored);
    }
    c->sock.close(ignored);
    c->watchdog.cancel();
    if (c->waiter) c->waiter->timer.cancel();
    conns.erase(c);
    n_conns = conns.size();
    if (!stopping && c->hello_done && !c->label.empty() && opts.on_lost) {
      opts.on_lost(c->label, reason);
    }
  }

  void shutdown_now() {
    stopping = true;
    boost::system::error_code ignored;
    acceptor.close(ignored);
    auto all = conns;
    for (const auto& c : all) close(c, "server stopping");
    io.stop();
  }
};

StoreServer::StoreServer(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  impl_->listen();
  asio::co_spawn(impl_->io, impl_->accept_loop(), asio::detached);
  impl_->thread = std::thread([impl = impl_.get()] {
    ::pthread_setname_np(::pthread_self(), "ddprun-store");  // names it in top -H, perf, gdb
    impl->io.run();
  });
}

StoreServer::~StoreServer() {
  stop();
}

std::uint16_t StoreServer::port() const {
  return impl_->bound_port;
}

void StoreServer::stop() {
  if (impl_->stopped.exchange(true)) return;
  asio::post(impl_->io, [impl = impl_.get()] { impl->shutdown_now(); });
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::size_t StoreServer::connection_count() const {
  return impl_->n_conns.load();
}
std::uint64_t StoreServer::dropped_count() const {
  return impl_->n_dropped.load();
}
std::uint64_t StoreServer::refused_count() const {
  return impl_->n_refused.load();
}

std::size_t StoreServer::labelled_count(const std::string& prefix) const {
  if (impl_->stopped.load()) return 0;
  auto result = std::make_shared<std::promise<std::size_t>>();
  auto fut = result->get_future();
  asio::post(impl_->io, [impl = impl_.get(), prefix, result] {
    std::size_t n = 0;
    for (const auto& c : impl->conns) {
      if (c->hello_done && c->label.starts_with(prefix)) ++n;
    }
    result->set_value(n);
  });
  // The server thread answers at once unless it is stopping; do not wait on a dead loop.
  if (fut.wait_for(std::chrono::seconds(5)) != std::future_status::ready) return 0;
  return fut.get();
}

}  // namespace ddprun::rdzv
