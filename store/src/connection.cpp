// One connection: deadlines, reading and serving frames, writing answers, closing.
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/core.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/write.hpp>

#include "server_impl.hpp"
#include "store/answer.hpp"
#include "store/error.hpp"

namespace ddprun::rdzv {
namespace {

namespace asio = boost::asio;
using detail::Clock;
using detail::use_nothrow;
constexpr std::size_t kMaxQueuedAnswers = 8;
constexpr std::size_t kConnBuffer = 1024;     // per connection; most requests fit
constexpr std::size_t kMaxBatch = 64 * 1024;  // answers to one read sent in one write, up to this

std::string peer_gone_reason(const boost::system::error_code& ec) {
  if (ec == asio::error::eof) return "connection closed by peer";
  // ddprun's client resets once it has read everything.
  if (ec == asio::error::connection_reset) return "connection closed by peer (reset)";
  return ec.message();
}

// After the peer's orderly close, a reset instead of our FIN is safe when every answer has left
// (nothing queued here, nothing unacknowledged in the kernel), and it spares both sides the
// FIN/ACK exchange: a third of the server's time when thousands of agents leave at once.
bool nothing_unsent(detail::Conn& c) {
  if (c.writing || !c.outq.empty()) return false;
  int unsent = 0;
  return ::ioctl(c.sock.native_handle(), SIOCOUTQ, &unsent) == 0 && unsent == 0;
}

}  // namespace

// ---- deadlines

// One timer per connection, armed only while it has a deadline (the handshake, a liveness
// promise, an idle timeout); a plain handler, not a coroutine: 1000s of agents connect at once.
void StoreServer::Impl::arm_watchdog(const ConnPtr& c) {
  if (!c->open || c->deadline == Clock::time_point::max()) return;
  c->watchdog.expires_at(c->deadline);
  c->watchdog.async_wait([this, c](const boost::system::error_code&) { on_watchdog(c); });
}

void StoreServer::Impl::on_watchdog(const ConnPtr& c) {
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

void StoreServer::Impl::touch(Conn& c) {
  if (c.liveness.count() > 0) {
    c.deadline = Clock::now() + c.liveness;
  } else if (opts.idle_timeout.count() > 0) {
    c.deadline = Clock::now() + opts.idle_timeout;
  } else {
    c.deadline = Clock::time_point::max();
  }
}

// ---- reading

// Each connection reads into a small buffer of its own (Asio tries the read before waiting, so
// a request that is already there costs no epoll round); when that fills, the rest is read at
// once into the server's one large buffer. Thousands of idle agents cost the server little.
asio::awaitable<void> StoreServer::Impl::session(ConnPtr c) {
  proto::FrameParser parser(proto::kMaxHelloSize);
  const auto small = std::make_unique_for_overwrite<char[]>(kConnBuffer);
  try {
    while (c->open) {
      auto [ec, n] = co_await c->sock.async_read_some(asio::buffer(small.get(), kConnBuffer), use_nothrow);
      if (!c->open) co_return;
      boost::system::error_code end = ec;  // set once the peer is gone
      if (!end) {
        parser.feed(std::string_view(small.get(), n));
        if (n == kConnBuffer) end = read_rest(*c, parser);
      }
      serve_frames(c, parser);
      if (end) {
        // After an orderly close with every answer out, a reset is safe (see nothing_unsent).
        const bool clean = end == asio::error::eof;
        close(c, peer_gone_reason(end), clean && nothing_unsent(*c) ? Closing::abortive : Closing::peer_gone);
        co_return;
      }
    }
  } catch (const std::exception& e) {
    // Garbage, absurd lengths, HTTP, a request behind a blocked one: this peer goes, nobody else
    // notices.
    ++n_dropped;
    close(c, e.what());
  }
}

// Reads what else is there into the shared buffer; returns the error once the peer is gone.
// Bounded, so a peer that streams requests cannot keep the server to itself.
boost::system::error_code StoreServer::Impl::read_rest(Conn& c, proto::FrameParser& parser) {
  boost::system::error_code end;
  for (int rounds = 0; rounds < 16; ++rounds) {
    const ssize_t got = ::recv(c.sock.native_handle(), read_buf.data(), read_buf.size(), MSG_DONTWAIT);
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
  return end;
}

// Serves every complete frame, in order; pipelined requests' answers leave in one write.
void StoreServer::Impl::serve_frames(const ConnPtr& c, proto::FrameParser& parser) {
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
}

void StoreServer::Impl::handle(const ConnPtr& c, proto::Request q) {
  if (c->blocked) {
    throw Error(Error::Kind::protocol, "protocol error: a request arrived while another was pending");
  }
  touch(*c);
  if (must_wait(data, q)) {
    block(c, std::move(q));
    return;
  }
  Answer a = answer(data, std::move(q));
  if (a.changed) waiters.notify(*a.changed, data);
  send(c, proto::encode_response(a.reply));
}

// ---- writing: try the socket directly, queue the rest behind one writer

void StoreServer::Impl::send(const ConnPtr& c, std::string frame) {
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

asio::awaitable<void> StoreServer::Impl::write_loop(ConnPtr c) {
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

// ---- closing

void StoreServer::Impl::close(const ConnPtr& c, const std::string& reason, Closing how) {
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

}  // namespace ddprun::rdzv
