// One connection: deadlines, reading and serving frames, writing answers, closing.
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string_view>
#include <utility>

#include <fmt/core.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/write.hpp>

#include "server_impl.hpp"
#include "store/answer.hpp"
#include "store/error.hpp"

namespace ddprun::store {
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
  c->watchdog_armed = true;
  c->watchdog.expires_at(c->deadline);
  c->watchdog.async_wait([this, c](const boost::system::error_code&) { on_watchdog(c); });
}

void StoreServer::Impl::on_watchdog(const ConnPtr& c) {
  c->watchdog_armed = false;
  if (!c->open) return;
  if (Clock::now() < c->deadline) {
    arm_watchdog(c);  // the deadline moved (a request arrived, or the handshake ended)
    return;
  }
  // A busy node 0 is not a lost agent: when this thread was starved, the peer's heartbeat may be
  // sitting unread in the socket. Bytes waiting count as a sign of life.
  if (c->hello_done && bytes_waiting(*c)) {
    touch(*c);
    arm_watchdog(c);
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

bool StoreServer::Impl::bytes_waiting(Conn& c) {
  int n = 0;
  return ::ioctl(c.sock.native_handle(), FIONREAD, &n) == 0 && n > 0;
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
    // notices. One that never said a valid hello is named like a refused one (rate-limited).
    ++n_dropped;
    if (!c->hello_done) log_rejection(*c, {}, fmt::format("not the ddprun protocol ({})", e.what()));
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
  touch(*c);
  // The heartbeat may come at any time (its pong is out of band): one connection carries both an
  // agent's blocking calls and its liveness.
  if (q.op == proto::Op::heartbeat) {
    static const detail::Shared pong = std::make_shared<const std::string>(proto::pong_frame());
    if ((q.number & 1) != 0) send_shared(c, pong);  // only when asked: most heartbeats cost one read
    return;
  }
  if (c->blocked) {
    throw Error(Error::Kind::protocol, "protocol error: a request arrived while another was pending");
  }
  if (q.op == proto::Op::watch) {
    watch(c, std::move(q));
    return;
  }
  if (must_wait(data, q)) {
    block(c, std::move(q));
    return;
  }
  if (q.op == proto::Op::get) {
    if (auto f = shared_get_frame(q.key)) {
      send_shared(c, std::move(f));
      return;
    }
  }
  send(c, proto::encode_response(apply_request(std::move(q)).reply));
}

Answer StoreServer::Impl::apply_request(proto::Request q) {
  if (q.op == proto::Op::del) get_frames.erase(q.key);
  Answer a = answer(data, std::move(q));
  if (a.changed) on_changed(*a.changed);
  return a;
}

detail::Shared StoreServer::Impl::shared_get_frame(const std::string& key) {
  constexpr std::size_t kShareFrom = 4096;  // smaller answers cost less than the lookup
  const std::string* v = data.find(key);
  if (!v || v->size() < kShareFrom) return nullptr;
  auto& f = get_frames[key];
  if (!f) f = std::make_shared<const std::string>(proto::encode_response({proto::Status::ok, 0, *v}));
  return f;
}

void StoreServer::Impl::on_changed(const std::string& key) {
  get_frames.erase(key);
  waiters.notify(key, data);
  publish(key);
}

// ---- watches: label, liveness promise and subscriptions of a connection

void StoreServer::Impl::watch(const ConnPtr& c, proto::Request q) {
  c->label = std::move(q.key);
  // The wire carries any u64; past 2^40 ms (35 years) it means "never", and stays positive.
  c->liveness = std::chrono::milliseconds(
      static_cast<std::int64_t>(std::min<std::uint64_t>(static_cast<std::uint64_t>(q.number), 1ULL << 40)));
  touch(*c);
  if (c->watchdog_armed) {
    c->watchdog.cancel();  // its handler re-arms at the new deadline
  } else {
    arm_watchdog(c);
  }
  unsubscribe(*c);
  c->subscribed = std::move(q.keys);
  for (std::uint32_t i = 0; i < c->subscribed.size(); ++i) subscribers[c->subscribed[i]][c.get()] = {c, i};
  send(c, proto::encode_response({}));
  // A key written before the watch began is pushed now: the watcher misses nothing.
  for (std::uint32_t i = 0; i < c->subscribed.size(); ++i) {
    if (const auto* v = data.find(c->subscribed[i]))
      send(c, proto::encode_response({proto::Status::event, i, *v}));
  }
}

void StoreServer::Impl::unsubscribe(Conn& c) {
  for (const auto& k : c.subscribed) {
    auto it = subscribers.find(k);
    if (it == subscribers.end()) continue;
    it->second.erase(&c);
    if (it->second.empty()) subscribers.erase(it);
  }
  c.subscribed.clear();
}

void StoreServer::Impl::publish(const std::string& key) {
  const auto it = subscribers.find(key);
  if (it == subscribers.end()) return;
  const std::string* v = data.find(key);
  if (!v) return;
  // Copied first: a failed send closes its connection, which unsubscribes it.
  std::vector<std::pair<ConnPtr, std::uint32_t>> subs;
  subs.reserve(it->second.size());
  for (const auto& [raw, sub] : it->second) subs.push_back(sub);
  std::unordered_map<std::uint32_t, detail::Shared> frames;  // one per index; usually one in all
  for (const auto& [c, i] : subs) {
    auto& f = frames[i];
    if (!f) f = std::make_shared<const std::string>(proto::encode_response({proto::Status::event, i, *v}));
    send_shared(c, f);
  }
}

// ---- writing: try the socket directly, queue the rest behind one writer

// While one read's answers collect, a frame joins the batch (true). One too large for it goes out on
// its own after what was batched, so the cap on queued answers still bites: the batch leaves here and
// the caller writes the frame (false), unless that closed the connection.
bool StoreServer::Impl::batched(const ConnPtr& c, std::string_view frame) {
  if (!c->batching) return false;
  if (c->batch.size() + frame.size() <= kMaxBatch) {
    c->batch += frame;
    return true;
  }
  if (!c->batch.empty()) {
    c->batching = false;
    send(c, std::exchange(c->batch, {}));
    c->batching = true;
  }
  return !c->open;
}

void StoreServer::Impl::send(const ConnPtr& c, std::string frame) {
  if (!c->open || batched(c, frame)) return;
  std::size_t off = 0;
  if (!c->writing) {
    const auto sent = write_now(c, frame);
    if (!sent) return;
    off = *sent;
  }
  enqueue(c, {std::make_shared<const std::string>(std::move(frame)), off});
}

// The same bytes for many connections (a fan-out): never copied, except into a batch.
void StoreServer::Impl::send_shared(const ConnPtr& c, detail::Shared frame) {
  if (!c->open || batched(c, *frame)) return;
  std::size_t off = 0;
  if (!c->writing) {
    const auto sent = write_now(c, *frame);
    if (!sent) return;
    off = *sent;
  }
  enqueue(c, {std::move(frame), off});
}

// Tries the socket directly; returns how much it took, or nullopt when nothing is left to queue
// (all sent, or the connection closed on an error).
std::optional<std::size_t> StoreServer::Impl::write_now(const ConnPtr& c, std::string_view bytes) {
  const ssize_t n = ::send(c->sock.native_handle(), bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  if (n == static_cast<ssize_t>(bytes.size())) {
    if (c->close_after_write) close(c, c->close_reason);
    return std::nullopt;
  }
  if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
    close(c, std::strerror(errno));
    return std::nullopt;
  }
  return n > 0 ? static_cast<std::size_t>(n) : 0;
}

void StoreServer::Impl::enqueue(const ConnPtr& c, detail::OutFrame f) {
  // Writes the kernel could not take pile up here only for a peer that sends without reading:
  // drop it before its answers eat the server's memory.
  if (c->outq.size() >= kMaxQueuedAnswers) {
    ++n_dropped;
    // Abortive (RST): what is queued for it in the kernel is thrown away too.
    close(c, "peer sends requests without reading the answers", Closing::abortive);
    return;
  }
  c->outq.push_back(std::move(f));
  if (!c->writing) {
    c->writing = true;
    asio::co_spawn(io, write_loop(c), asio::detached);
  }
}

asio::awaitable<void> StoreServer::Impl::write_loop(ConnPtr c) {
  while (c->open && !c->outq.empty()) {
    const detail::OutFrame& f = c->outq.front();
    auto [ec, n] = co_await asio::async_write(
        c->sock, asio::buffer(f.buf->data() + f.off, f.buf->size() - f.off), use_nothrow);
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
  unsubscribe(*c);
  conns.erase(c);
  n_conns = conns.size();
  if (!stopping && c->hello_done && !c->label.empty() && opts.on_lost) {
    opts.on_lost(c->label, reason);
  }
}

}  // namespace ddprun::store
