// The store server: listening, accepting, and the public StoreServer API. A connection's life
// is in connection.cpp, the hello in handshake.cpp, blocked requests in waiters.cpp.
#include "store/server.hpp"

#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/core.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/post.hpp>

#include "server_impl.hpp"
#include "store/answer.hpp"
#include "store/error.hpp"
#include "store/sockaddr.hpp"

namespace ddprun::store {
namespace {

namespace asio = boost::asio;
using detail::Clock;
using detail::tcp;
using detail::use_nothrow;
constexpr int kListenBacklog = 65535;
// Over the cap, this many more are admitted just long enough to read the one-line reason.
constexpr std::size_t kOverCapGrace = 64;

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

void StoreServer::Impl::listen() {
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
  // "::" (an agent advertising IPv6, --rdzv-iface) still takes the IPv4 agents, whatever bindv6only says.
  if (!ec && ep.address().is_v6()) acceptor.set_option(asio::ip::v6_only(false), ec);
  // Accepted sockets inherit both from the listener (Linux): two syscalls less per agent.
  if (!ec) acceptor.set_option(tcp::no_delay(true), ec);
  if (!ec) acceptor.set_option(asio::socket_base::keep_alive(true), ec);
  if (!ec) acceptor.bind(ep, ec);
  // An accept storm of 16k nodes: the kernel clamps this to net.core.somaxconn (docs/rendezvous.md).
  if (!ec) acceptor.listen(kListenBacklog, ec);
  if (!ec) acceptor.non_blocking(true, ec);  // accept4 drains it until EAGAIN
  if (ec) {
    boost::system::error_code ignored;
    acceptor.close(ignored);
    throw Error(ec == asio::error::address_in_use ? Error::Kind::address_in_use : Error::Kind::io,
                fmt::format("cannot serve the rendezvous store on {}: {}; free the port or "
                            "choose another one (--rdzv-endpoint HOST:PORT)",
                            where, ec.message()),
                "listen", where);
  }
  bound_port = acceptor.local_endpoint().port();
}

void StoreServer::Impl::accept_loop() {
  struct Accepted {
    int fd;
    sockaddr_storage peer;
  };
  pollfd fds[2] = {{acceptor.native_handle(), POLLIN, 0}, {accept_stop_fd, POLLIN, 0}};
  for (;;) {
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) return;
    if (fds[1].revents != 0) return;
    // Drain the backlog in one go; accept4 makes each socket close-on-exec atomically.
    std::vector<Accepted> batch;
    bool out_of_fds = false;
    for (;;) {
      Accepted a{-1, {}};
      socklen_t len = sizeof a.peer;
      a.fd = ::accept4(acceptor.native_handle(), reinterpret_cast<sockaddr*>(&a.peer), &len,
                       SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (a.fd >= 0) {
        batch.push_back(a);
        continue;
      }
      if (errno == EINTR || errno == ECONNABORTED) continue;
      out_of_fds = errno == EMFILE || errno == ENFILE;
      break;
    }
    asio::post(io, [this, batch = std::move(batch), out_of_fds] {
      for (const auto& a : batch) admit(a.fd, a.peer);
      if (out_of_fds) log_rejection_line(connection_limit_message(max_conns, fd_limits));
    });
    // Out of descriptors: back off briefly instead of spinning on a readable listener.
    if (out_of_fds) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void StoreServer::Impl::admit(int fd, const sockaddr_storage& peer) {
  const bool over_cap = conns.size() >= max_conns;
  if (over_cap && conns.size() >= max_conns + kOverCapGrace) {
    ::close(fd);
    ++n_refused;
    return;
  }
  tcp::socket s(io);
  boost::system::error_code ec;
  s.assign(peer.ss_family == AF_INET6 ? tcp::v6() : tcp::v4(), fd, ec);
  if (ec) {
    ::close(fd);
    return;
  }
  // The descriptor is non-blocking (accept4), and the fast paths call recv/send with
  // MSG_DONTWAIT themselves: one peer that does not read can never stall the server.
  auto c = std::make_shared<Conn>(std::move(s));
  c->peer_addr = peer;     // formatted only if a rejection is logged
  c->over_cap = over_cap;  // its hello is answered with the limit and the fix, then it goes
  c->deadline = Clock::now() + opts.handshake_timeout;
  conns.insert(c);
  n_conns = conns.size();
  asio::co_spawn(io, session(c), asio::detached);
  arm_watchdog(c);
}

void StoreServer::Impl::shutdown_now() {
  stopping = true;
  boost::system::error_code ignored;
  acceptor.close(ignored);
  auto all = conns;
  for (const auto& c : all) close(c, "server stopping");
  io.stop();
}

StoreServer::StoreServer(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  impl_->fd_limits = raise_fd_limit();
  impl_->max_conns =
      impl_->opts.max_connections > 0 ? impl_->opts.max_connections : connection_cap(impl_->fd_limits.soft);
  impl_->listen();
  impl_->accept_stop_fd = ::eventfd(0, EFD_CLOEXEC);
  if (impl_->accept_stop_fd < 0) {
    throw Error(Error::Kind::io,
                fmt::format("cannot serve the rendezvous store: eventfd: {}", std::strerror(errno)),
                "listen");
  }
  impl_->thread = std::thread([impl = impl_.get()] {
    ::pthread_setname_np(::pthread_self(), "ddprun-store");  // names it in top -H, perf, gdb
    impl->io.run();
  });
  impl_->accept_thread = std::thread([impl = impl_.get()] {
    ::pthread_setname_np(::pthread_self(), "ddprun-accept");
    impl->accept_loop();
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
  // The accept thread ends first: what it handed over is admitted, then closed with the rest.
  if (impl_->accept_thread.joinable()) {
    const std::uint64_t one = 1;
    if (::write(impl_->accept_stop_fd, &one, sizeof one) < 0) {
    }  // an eventfd write cannot fail here
    impl_->accept_thread.join();
  }
  if (impl_->accept_stop_fd >= 0) ::close(impl_->accept_stop_fd);
  impl_->accept_stop_fd = -1;
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

std::size_t StoreServer::connection_limit() const {
  return impl_->max_conns;
}

proto::Response StoreServer::apply(proto::Request q) const {
  if (q.op == proto::Op::heartbeat || q.op == proto::Op::watch) {
    throw Error(Error::Kind::usage, "store apply: heartbeat and watch need a connection", "apply");
  }
  q.timeout_ms = 0;  // the server thread never blocks for us
  auto result = std::make_shared<std::promise<proto::Response>>();
  auto fut = result->get_future();
  if (!impl_->stopped.load()) {
    asio::post(impl_->io, [impl = impl_.get(), q = std::move(q), result]() mutable {
      result->set_value(impl->apply_request(std::move(q)).reply);
    });
    // Slices: a server stopping under us never runs the handler.
    while (!impl_->stopped.load()) {
      if (fut.wait_for(std::chrono::milliseconds(100)) == std::future_status::ready) return fut.get();
    }
  }
  throw Error(Error::Kind::io, "store apply: the store server has stopped", "apply");
}

std::vector<Refusal> StoreServer::refusals() const {
  std::lock_guard lk(impl_->refusals_mu);
  return impl_->refusals;
}

std::size_t StoreServer::labelled_count(const std::string& prefix) const {
  return labels(prefix).size();
}

std::vector<std::string> StoreServer::labels(const std::string& prefix) const {
  if (impl_->stopped.load()) return {};
  auto result = std::make_shared<std::promise<std::vector<std::string>>>();
  auto fut = result->get_future();
  asio::post(impl_->io, [impl = impl_.get(), prefix, result] {
    std::vector<std::string> out;
    for (const auto& c : impl->conns) {
      if (c->hello_done && c->label.starts_with(prefix)) out.push_back(c->label);
    }
    result->set_value(std::move(out));
  });
  // The server thread answers as soon as it runs, which on a busy node may take seconds: an empty
  // answer then would read as "nobody is connected". Only a stopping server gives up.
  while (fut.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    if (impl_->stopped.load()) return {};
  }
  return fut.get();
}

std::vector<std::string> StoreServer::peer_hosts() const {
  if (impl_->stopped.load()) return {};
  auto result = std::make_shared<std::promise<std::vector<std::string>>>();
  auto fut = result->get_future();
  asio::post(impl_->io, [impl = impl_.get(), result] {
    std::set<std::string> hosts;
    for (const auto& c : impl->conns) {
      if (c->hello_done) hosts.insert(numeric_host_of(c->peer_addr));
    }
    result->set_value(std::vector<std::string>(hosts.begin(), hosts.end()));
  });
  while (fut.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    if (impl_->stopped.load()) return {};
  }
  return fut.get();
}

}  // namespace ddprun::store
