// torch's TCPStore semantics, one small handler per operation (store/c10d_keyspace.hpp).
#include "store/c10d_keyspace.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>

#include <fmt/core.h>

#include "store/error.hpp"

namespace ddprun::store::c10d {

namespace {

// A protocol violation or a broken limit: the caller closes the connection (torch's servers do the
// same; the protocol has no error reply).
[[noreturn]] void refuse(const std::string& what) {
  throw Error(Error::Kind::protocol, "worker store: " + what, "c10d");
}

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

std::ptrdiff_t signed_size(std::size_t n) {
  return static_cast<std::ptrdiff_t>(n);
}

}  // namespace

void Keyspace::apply(const Peer& from, Request& q) {
  switch (q.op) {
    case Op::validate:
    case Op::ping:
      return on_handshake(from, q);
    case Op::set:
      return on_set(q.keys[0], q.values[0]);
    case Op::compare_set:
      return on_compare_set(from, q);
    case Op::get:
      return on_get(from, q);
    case Op::add:
      return on_add(from, q);
    case Op::check:
      return on_check(from, q);
    case Op::wait:
      return on_wait(from, q);
    case Op::num_keys:
      return reply_i64(from, q.tag, static_cast<std::int64_t>(kv_.size()));
    case Op::watch_key:
      return on_watch(from, q);
    case Op::delete_key:
      return on_delete(from, q);
    case Op::append:
      return on_append(q);
    case Op::multi_get:
      return on_multi_get(from, q);
    case Op::multi_set:
      for (std::size_t i = 0; i < q.keys.size(); ++i) on_set(q.keys[i], q.values[i]);
      return;
    case Op::cancel_wait:
      return on_cancel(from, q);
    case Op::queue_push:
      return on_queue_push(q);
    case Op::queue_pop:
      return on_queue_pop(from, q);
    case Op::queue_len:
      return on_queue_len(from, q);
    case Op::list:
      return on_list(from, q);
  }
}

void Keyspace::clear() {
  kv_.clear();
  queues_.clear();
  peers_.clear();
  waits_.clear();
  waiting_.clear();
  watchers_.clear();
  refs_total_ = refs_live_ = 0;
  stored_ = 0;
}

// ---- answers ----

template <typename Body>
bool Keyspace::reply(const Peer& to, std::uint32_t tag, Body&& body) {
  std::string* out = out_.to(to.id);
  if (out == nullptr) return false;
  const std::size_t at = to.relay ? begin_tagged(*out, tag) : 0;
  body(*out);
  if (to.relay) end_tagged(*out, at);
  return true;
}

void Keyspace::reply_u8(const Peer& to, std::uint32_t tag, std::uint8_t v) {
  reply(to, tag, [v](std::string& out) { put_u8(out, v); });
}
void Keyspace::reply_i64(const Peer& to, std::uint32_t tag, std::int64_t v) {
  reply(to, tag, [v](std::string& out) { put_i64(out, v); });
}
void Keyspace::reply_bytes(const Peer& to, std::uint32_t tag, std::string_view v) {
  reply(to, tag, [v](std::string& out) { put_bytes(out, v); });
}

// ---- the keys ----

bool Keyspace::exists(const std::string& key) const {
  if (kv_.contains(key)) return true;
  const auto q = queues_.find(key);
  return q != queues_.end() && !q->second.empty();
}

std::ptrdiff_t Keyspace::set_cost(const std::string& key, const std::string& value) const {
  const auto it = kv_.find(key);
  if (it == kv_.end()) return signed_size(key.size() + value.size());
  return signed_size(value.size()) - signed_size(it->second.size());
}

void Keyspace::check_room(std::ptrdiff_t delta) const {
  if (delta > 0 && stored_ + static_cast<std::size_t>(delta) > limits_.max_stored_bytes) {
    refuse(fmt::format("the store would hold more than {} bytes", limits_.max_stored_bytes));
  }
}

void Keyspace::account(std::ptrdiff_t delta) {
  check_room(delta);
  stored_ = static_cast<std::size_t>(signed_size(stored_) + delta);
}

void Keyspace::on_handshake(const Peer& from, const Request& q) {
  if (q.op == Op::validate) {
    if (q.u32 != kValidateMagic) refuse("VALIDATE with a wrong magic number");
    return;
  }
  reply(from, q.tag, [&](std::string& out) { put_u32(out, q.u32); });
}

void Keyspace::on_get(const Peer& from, Request& q) {
  const auto it = kv_.find(q.keys[0]);
  reply_bytes(from, q.tag, it == kv_.end() ? std::string_view() : std::string_view(it->second));
}

void Keyspace::on_set(std::string& key, std::string& value) {
  auto it = kv_.find(key);
  if (it == kv_.end()) {
    account(signed_size(key.size() + value.size()));
    if (!watchers_.empty()) notify(key, WatchEvent::created, {}, value);
    it = kv_.emplace(std::move(key), std::move(value)).first;
  } else {
    account(signed_size(value.size()) - signed_size(it->second.size()));
    if (!watchers_.empty()) notify(it->first, WatchEvent::updated, it->second, value);
    it->second = std::move(value);
  }
  wake(it->first);
}

// The four cases of torch's servers. Waiters wake only when a value was written (libuv also wakes
// them when nothing changed, and 1.x's server not even on creation).
void Keyspace::on_compare_set(const Peer& from, Request& q) {
  std::string& key = q.keys[0];
  std::string& expected = q.values[0];
  std::string& desired = q.values[1];
  const auto it = kv_.find(key);
  if (it == kv_.end() && !expected.empty()) {
    reply_bytes(from, q.tag, expected);  // missing, something expected: torch answers `expected`
    return;
  }
  if (it != kv_.end() && it->second != expected) {
    reply_bytes(from, q.tag, it->second);
    return;
  }
  check_room(set_cost(key, desired));  // before the answer: a set that cannot be done is not answered
  reply_bytes(from, q.tag, desired);
  on_set(key, desired);
}

void Keyspace::on_add(const Peer& from, Request& q) {
  std::string& key = q.keys[0];
  std::int64_t value = q.number;
  const auto it = kv_.find(key);
  if (it != kv_.end()) {
    const auto old = parse_counter(it->second);
    if (!old) refuse(fmt::format("ADD to a key that holds no number ({} bytes)", it->second.size()));
    value = static_cast<std::int64_t>(static_cast<std::uint64_t>(*old) + static_cast<std::uint64_t>(value));
  }
  std::string text = std::to_string(value);
  check_room(set_cost(key, text));
  reply_i64(from, q.tag, value);
  on_set(key, text);
}

void Keyspace::on_check(const Peer& from, const Request& q) {
  const bool ready =
      std::all_of(q.keys.begin(), q.keys.end(), [&](const std::string& k) { return exists(k); });
  reply_u8(from, q.tag, ready ? kReady : kNotReady);
}

void Keyspace::on_delete(const Peer& from, const Request& q) {
  const auto it = kv_.find(q.keys[0]);
  if (it == kv_.end()) {
    reply_i64(from, q.tag, 0);
    return;
  }
  if (!watchers_.empty()) notify(it->first, WatchEvent::deleted, it->second, {});
  account(-signed_size(it->first.size() + it->second.size()));
  kv_.erase(it);
  reply_i64(from, q.tag, 1);
}

void Keyspace::on_append(Request& q) {
  const auto it = kv_.find(q.keys[0]);
  if (it == kv_.end()) {
    on_set(q.keys[0], q.values[0]);
    return;
  }
  account(signed_size(q.values[0].size()));
  if (!watchers_.empty()) {
    const std::string old = it->second;
    it->second += q.values[0];
    notify(it->first, WatchEvent::updated, old, it->second);
  } else {
    it->second += q.values[0];
  }
  wake(it->first);
}

void Keyspace::on_multi_get(const Peer& from, const Request& q) {
  std::size_t total = 0;
  for (const auto& k : q.keys) {
    const auto it = kv_.find(k);
    total += 8 + (it == kv_.end() ? 0 : it->second.size());
  }
  if (total > limits_.max_reply) refuse(fmt::format("MULTI_GET answer over {} bytes", limits_.max_reply));
  reply(from, q.tag, [&](std::string& out) {
    for (const auto& k : q.keys) {
      const auto it = kv_.find(k);
      put_bytes(out, it == kv_.end() ? std::string_view() : std::string_view(it->second));
    }
  });
}

void Keyspace::on_list(const Peer& from, const Request& q) {
  std::size_t total = 8;
  for (const auto& [k, v] : kv_) total += 8 + k.size();
  if (total > limits_.max_reply) refuse(fmt::format("LIST answer over {} bytes", limits_.max_reply));
  reply(from, q.tag, [&](std::string& out) {
    put_i64(out, static_cast<std::int64_t>(kv_.size()));
    for (const auto& [k, v] : kv_) put_bytes(out, k);
  });
}

// ---- queues ----

void Keyspace::on_queue_push(Request& q) {
  account(signed_size(q.values[0].size()));
  queues_[q.keys[0]].push_back(std::move(q.values[0]));
  wake_one(q.keys[0]);
}

void Keyspace::on_queue_pop(const Peer& from, const Request& q) {
  const auto it = queues_.find(q.keys[0]);
  const std::size_t n = it == queues_.end() ? 0 : it->second.size();
  reply(from, q.tag, [&](std::string& out) {
    put_i64(out, static_cast<std::int64_t>(n));
    if (n > 0) put_bytes(out, it->second.front());
  });
  if (n == 0) return;
  account(-signed_size(it->second.front().size()));
  it->second.pop_front();
  if (it->second.empty()) queues_.erase(it);
}

void Keyspace::on_queue_len(const Peer& from, const Request& q) {
  const auto it = queues_.find(q.keys[0]);
  reply_i64(from, q.tag, it == queues_.end() ? 0 : static_cast<std::int64_t>(it->second.size()));
}

// ---- WAIT, CANCEL_WAIT, WATCH_KEY ----

// WAIT is answered when every key exists: at once, or by the write that creates the last one.
void Keyspace::on_wait(const Peer& from, Request& q) {
  std::uint32_t missing = 0;
  for (const auto& k : q.keys) missing += exists(k) ? 0u : 1u;
  if (missing == 0) {
    reply_u8(from, q.tag, kStopWaiting);
    return;
  }
  PeerState& p = peers_[from.id];
  if (p.waits.size() >= (from.relay ? kMaxRelayWaits : kMaxDirectWaits)) {
    refuse(fmt::format("more than {} WAITs pending on one connection", p.waits.size()));
  }
  // Ids of dropped waits count until swept: sweep them before refusing anyone.
  if (refs_total_ + missing > limits_.max_waiting && refs_total_ > refs_live_) compact_waiting();
  if (refs_total_ + missing > limits_.max_waiting) {
    refuse(fmt::format("more than {} keys awaited in the whole store", limits_.max_waiting));
  }
  const std::uint64_t id = ++next_wait_;
  waits_.emplace(id, Wait{from, q.tag, missing});
  p.waits.push_back(id);
  for (auto& k : q.keys) {
    if (!exists(k)) waiting_[std::move(k)].push_back(id);
  }
  refs_total_ += missing;
  refs_live_ += missing;
}

void Keyspace::finish_wait(std::uint64_t id) {
  const auto w = waits_.find(id);
  const Wait wait = w->second;
  waits_.erase(w);
  const auto p = peers_.find(wait.peer.id);
  if (p != peers_.end()) std::erase(p->second.waits, id);
  reply_u8(wait.peer, wait.tag, kStopWaiting);
}

void Keyspace::wake(const std::string& key) {
  const auto it = waiting_.find(key);
  if (it == waiting_.end()) return;
  const std::vector<std::uint64_t> ids = std::move(it->second);
  waiting_.erase(it);
  refs_total_ -= ids.size();
  for (const std::uint64_t id : ids) {
    const auto w = waits_.find(id);
    if (w == waits_.end()) continue;  // cancelled or its peer gone
    --refs_live_;
    if (--w->second.remaining == 0) finish_wait(id);
  }
}

// QUEUE_PUSH: one value, so one waiter (the first still waiting) takes it.
void Keyspace::wake_one(const std::string& key) {
  const auto it = waiting_.find(key);
  if (it == waiting_.end()) return;
  auto& ids = it->second;
  std::size_t used = 0;
  while (used < ids.size()) {
    const std::uint64_t id = ids[used++];
    const auto w = waits_.find(id);
    if (w == waits_.end()) continue;
    --refs_live_;
    if (--w->second.remaining == 0) {
      finish_wait(id);
      break;
    }
  }
  ids.erase(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(used));
  refs_total_ -= used;
  if (ids.empty()) waiting_.erase(it);
}

void Keyspace::forget(std::uint64_t id) {
  const auto p = peers_.find(id);
  if (p == peers_.end()) return;
  drop_waits(p->second);
  peers_.erase(p);
}

void Keyspace::drop_waits(PeerState& p) {
  for (const std::uint64_t id : p.waits) {
    const auto w = waits_.find(id);
    if (w == waits_.end()) continue;
    refs_live_ -= w->second.remaining;
    waits_.erase(w);
  }
  p.waits.clear();
  // Their ids stay in the key lists until a write or this sweep takes them out.
  if (refs_total_ > 2 * refs_live_ + 65536) compact_waiting();
}

void Keyspace::compact_waiting() {
  refs_total_ = 0;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    std::erase_if(it->second, [&](std::uint64_t id) { return !waits_.contains(id); });
    refs_total_ += it->second.size();
    it = it->second.empty() ? waiting_.erase(it) : std::next(it);
  }
}

// CANCEL_WAIT: a direct client's pending WAITs are dropped and WAIT_CANCELED always answered (a
// STOP_WAITING already sent comes before it, as the client expects). From a relay the tag names the
// one wait to drop, and the relay has already answered its worker.
void Keyspace::on_cancel(const Peer& from, const Request& q) {
  PeerState& p = peers_[from.id];
  if (!from.relay) {
    drop_waits(p);
    reply_u8(from, q.tag, kWaitCanceled);
    return;
  }
  for (const std::uint64_t id : p.waits) {
    const auto w = waits_.find(id);
    if (w != waits_.end() && w->second.tag == q.tag) {
      refs_live_ -= w->second.remaining;
      waits_.erase(w);
      std::erase(p.waits, id);
      return;
    }
  }
}

void Keyspace::on_watch(const Peer& from, const Request& q) {
  PeerState& p = peers_[from.id];
  const std::size_t cap = from.relay ? kMaxRelayWaits : kMaxWatches;
  if (p.watches >= cap) refuse(fmt::format("more than {} keys watched on one connection", cap));
  ++p.watches;
  watchers_[q.keys[0]].push_back(Watch{from, q.tag});
  reply_u8(from, q.tag, static_cast<std::uint8_t>(WatchEvent::registered));
}

void Keyspace::notify(const std::string& key, WatchEvent type, std::string_view old_value,
                      std::string_view new_value) {
  const auto it = watchers_.find(key);
  if (it == watchers_.end()) return;
  std::erase_if(it->second, [&](const Watch& w) {  // a watcher that is gone is dropped
    return !reply(w.peer, w.tag,
                  [&](std::string& o) { put_watch_event(o, type, key, old_value, new_value); });
  });
  if (it->second.empty()) watchers_.erase(it);
}

}  // namespace ddprun::store::c10d
