// TcpStore's public calls. Connecting is in client_connect.cpp; sending, answers and pipelined
// sets in client_call.cpp.
#include "store/client.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <thread>
#include <utility>

#include <algorithm>

#include "client_impl.hpp"

namespace ddprun::store {

using detail::Clock;

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

bool TcpStore::try_set(const std::string& key, const std::string& value) {
  impl_->check_key(key, "set");
  std::unique_lock lk(impl_->mu, std::try_to_lock);
  if (!lk.owns_lock() || impl_->hello_pending) return false;
  impl_->require_connected("set", key);
  if (impl_->unacked.size() >= detail::kMaxUnacked) {
    impl_->pump();  // the answers that have come, without waiting
    while (!impl_->unacked.empty() && !impl_->answers.empty()) {
      const proto::Response r = std::move(impl_->answers.front());
      impl_->answers.pop_front();
      if (r.status != proto::Status::ok)
        impl_->fail(Error::Kind::rejected, "set", impl_->unacked.front(), r.value);
      impl_->unacked.erase(impl_->unacked.begin());
    }
    if (impl_->unacked.size() >= detail::kMaxUnacked) return false;
  }
  proto::Request q;
  q.op = proto::Op::set;
  q.key = key;
  q.value = value;
  const std::string frame = proto::encode_request(q);
  if (frame.size() - proto::kHeaderSize > impl_->opts.limits.max_message) return false;
  // A few kilobytes behind at most kMaxUnacked others: the socket's buffer takes it at once.
  impl_->write_all(frame, Clock::now() + impl_->opts.op_timeout, "set", key);
  impl_->unacked.push_back(key);
  return true;
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

void TcpStore::flush(Millis limit) {
  std::lock_guard lk(impl_->mu);
  if (impl_->unacked.empty() && !impl_->hello_pending) return;
  impl_->require_connected("flush", {});
  impl_->drain(Clock::now() + clamp_timeout(limit), "flush", {});
}

void TcpStore::watch(const std::string& label, Millis liveness, const std::vector<std::string>& keys) {
  for (const auto& k : keys) impl_->check_key(k, "watch");
  proto::Request q;
  q.op = proto::Op::watch;
  q.key = label;
  q.number = clamp_timeout(liveness).count();
  q.keys = keys;
  impl_->call(q);
  // What came before the answer was pushed for the keys watched until now (a standby's earlier round's
  // abort): not this watch's news. The server pushes the new keys' present values after its answer.
  std::lock_guard lk(impl_->ev_mu);
  impl_->events.clear();
}

bool TcpStore::heartbeat(bool want_pong) {
  static const std::string frames[2] = {[] {
                                          proto::Request q;
                                          q.op = proto::Op::heartbeat;
                                          return proto::encode_request(q);
                                        }(),
                                        [] {
                                          proto::Request q;
                                          q.op = proto::Op::heartbeat;
                                          q.number = 1;
                                          return proto::encode_request(q);
                                        }()};
  const std::string& frame = frames[want_pong ? 1 : 0];
  // Not under the call mutex: a call blocked on this connection must not hold up the heartbeat.
  std::lock_guard wlk(impl_->wmu);
  const int f = impl_->fd.load();
  if (f < 0) return false;
  // 6 bytes never block in practice; a full send buffer means the server stopped reading, which
  // the missing pongs report.
  const ssize_t n = ::send(f, frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  return n == static_cast<ssize_t>(frame.size()) || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
}

std::vector<TcpStore::Event> TcpStore::poll_events(Millis timeout, int wake_fd) {
  const int f = impl_->fd.load();
  if (f < 0) {
    // Events a call set aside before the connection closed are still the peer's last word.
    std::lock_guard elk(impl_->ev_mu);
    if (!impl_->events.empty()) return std::exchange(impl_->events, {});
    throw Error(Error::Kind::io, fmt::format("store watch at {}: not connected", impl_->where), "watch");
  }
  pollfd p[2] = {{f, POLLIN, 0}, {wake_fd, POLLIN, 0}};
  const int r = ::poll(p, wake_fd >= 0 ? 2 : 1,
                       static_cast<int>(std::min<Millis>(clamp_timeout(timeout), Millis{1 << 30}).count()));
  if (r > 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
    std::unique_lock lk(impl_->mu, std::try_to_lock);
    if (lk.owns_lock()) {
      impl_->pump();
    } else {
      // A call is reading this connection; it sets the events aside. Let it.
      std::this_thread::sleep_for(Millis{5});
    }
  }
  std::lock_guard elk(impl_->ev_mu);
  return std::exchange(impl_->events, {});
}

std::uint64_t TcpStore::bytes_received() const {
  return impl_->received.load();
}

std::chrono::steady_clock::time_point TcpStore::last_heard() const {
  return Clock::time_point(Clock::duration(impl_->last_heard.load()));
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

}  // namespace ddprun::store
