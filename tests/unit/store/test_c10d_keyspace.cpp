// The workers' store's semantics without sockets (store/c10d_keyspace.hpp): tables of requests from
// several peers against one keyspace, in order, with the bytes each peer receives from each request,
// as torch's own servers answer; the limits, which refuse a request and leave the keyspace as it was.
#include <catch2/catch.hpp>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "store/c10d_keyspace.hpp"
#include "store/error.hpp"

using namespace ddprun::store;
using namespace ddprun::store::c10d;

namespace {

// A buffer per peer; a peer in `gone` has closed.
struct Buffers final : Outbox {
  std::map<std::uint64_t, std::string> bufs;
  std::set<std::uint64_t> gone;
  std::string* to(std::uint64_t id) override { return gone.contains(id) ? nullptr : &bufs[id]; }
};

Request req(Op op, std::vector<std::string> keys = {}, std::vector<std::string> values = {},
            std::int64_t number = 0) {
  Request q;
  q.op = op;
  q.keys = std::move(keys);
  q.values = std::move(values);
  q.number = number;
  return q;
}
Request tagged(Request q, std::uint32_t tag) {
  q.tag = tag;
  return q;
}
Request with_u32(Op op, std::uint32_t v) {
  Request q = req(op);
  q.u32 = v;
  return q;
}

std::string u8(std::uint8_t v) {
  std::string s;
  put_u8(s, v);
  return s;
}
std::string u32(std::uint32_t v) {
  std::string s;
  put_u32(s, v);
  return s;
}
std::string i64(std::int64_t v) {
  std::string s;
  put_i64(s, v);
  return s;
}
std::string bytes(std::string_view v) {
  std::string s;
  put_bytes(s, v);
  return s;
}
std::string frame(std::uint32_t tag, const std::string& body) {
  std::string s;
  const auto at = begin_tagged(s, tag);
  s += body;
  end_tagged(s, at);
  return s;
}
std::string event(WatchEvent type, std::string_view key, std::string_view before, std::string_view after) {
  std::string s;
  put_watch_event(s, type, key, before, after);
  return s;
}

constexpr Peer A{1, false};
constexpr Peer B{2, false};
constexpr Peer R{3, true};  // a relay

struct Row {
  using Answers = std::map<std::uint64_t, std::string>;  // what each peer receives from it
  Row(const char* w, Peer f, Request r, Answers a, bool ref = false)
      : what(w), from(f), q(std::move(r)), answers(std::move(a)), refused(ref) {}
  const char* what;
  Peer from;
  Request q;
  Answers answers;
  bool refused = false;                 // store::Error(protocol), nothing answered
  std::optional<std::uint64_t> forget;  // instead of a request: this peer closes
};

Row forget(const char* what, std::uint64_t id) {
  Row r(what, {}, {}, {});
  r.forget = id;
  return r;
}

void run(const std::vector<Row>& rows, KeyspaceLimits limits = {}) {
  Buffers out;
  Keyspace ks(limits, out);
  for (const auto& row : rows) {
    INFO(row.what);
    out.bufs.clear();
    if (row.forget) {
      ks.forget(*row.forget);
      out.gone.insert(*row.forget);
    } else {
      Request q = row.q;
      bool refused = false;
      try {
        ks.apply(row.from, q);
      } catch (const Error& e) {
        refused = e.kind() == Error::Kind::protocol;
      }
      CHECK(refused == row.refused);
    }
    std::map<std::uint64_t, std::string> got;
    for (const auto& [id, b] : out.bufs) {
      if (!b.empty()) got[id] = b;
    }
    CHECK(got == row.answers);
  }
}

}  // namespace

TEST_CASE("keyspace: SET, GET, ADD, COMPARE_SET and the rest, as torch's servers answer",
          "[c10d][keyspace]") {
  run({
      {"PING echoes its number", A, with_u32(Op::ping, 0xDEADBEEF), {{1, u32(0xDEADBEEF)}}},
      {"VALIDATE with the magic: nothing", A, with_u32(Op::validate, kValidateMagic), {}},
      {"VALIDATE with another number: refused", A, with_u32(Op::validate, 7), {}, true},
      {"GET of a missing key: empty, as libuv's server", A, req(Op::get, {"/k"}), {{1, bytes("")}}},
      {"SET: no answer", A, req(Op::set, {"/k"}, {"v"}), {}},
      {"GET", B, req(Op::get, {"/k"}), {{2, bytes("v")}}},
      {"ADD to a missing key starts at 0", A, req(Op::add, {"init/"}, {}, 1), {{1, i64(1)}}},
      {"ADD again", B, req(Op::add, {"init/"}, {}, 1), {{2, i64(2)}}},
      {"ADD keeps decimal text", A, req(Op::get, {"init/"}), {{1, bytes("2")}}},
      {"ADD of a negative delta", A, req(Op::add, {"init/"}, {}, -5), {{1, i64(-3)}}},
      {"ADD to text: refused", A, req(Op::add, {"/k"}, {}, 1), {}, true},
      {"... and the text is still there", A, req(Op::get, {"/k"}), {{1, bytes("v")}}},
      {"SET of a counter with spaces and a sign", A, req(Op::set, {"/n"}, {" +41xyz"}), {}},
      {"ADD reads it as std::stoll does", A, req(Op::add, {"/n"}, {}, 1), {{1, i64(42)}}},
      {"COMPARE_SET, missing, something expected: `expected`, nothing stored",
       A,
       req(Op::compare_set, {"/c"}, {"exp", "new"}),
       {{1, bytes("exp")}}},
      {"CHECK: still missing", A, req(Op::check, {"/c"}), {{1, u8(kNotReady)}}},
      {"COMPARE_SET, missing, nothing expected: stored",
       A,
       req(Op::compare_set, {"/c"}, {"", "v1"}),
       {{1, bytes("v1")}}},
      {"COMPARE_SET, present and equal: replaced",
       A,
       req(Op::compare_set, {"/c"}, {"v1", "v2"}),
       {{1, bytes("v2")}}},
      {"COMPARE_SET, present and different: the current value",
       A,
       req(Op::compare_set, {"/c"}, {"z", "v3"}),
       {{1, bytes("v2")}}},
      {"CHECK, all there", A, req(Op::check, {"/c", "/k"}), {{1, u8(kReady)}}},
      {"CHECK, one missing", A, req(Op::check, {"/c", "/nope"}), {{1, u8(kNotReady)}}},
      {"NUM_KEYS", A, req(Op::num_keys), {{1, i64(4)}}},
      {"MULTI_SET", A, req(Op::multi_set, {"/x", "/y"}, {"1", "22"}), {}},
      {"MULTI_GET: a missing key reads empty",
       A,
       req(Op::multi_get, {"/x", "/nope", "/y"}),
       {{1, bytes("1") + bytes("") + bytes("22")}}},
      {"APPEND to a key", A, req(Op::append, {"/x"}, {"+more"}), {}},
      {"APPEND to a missing key sets it", A, req(Op::append, {"/new"}, {"first"}), {}},
      {"GET after APPEND", A, req(Op::get, {"/x"}), {{1, bytes("1+more")}}},
      {"DELETE_KEY, present", A, req(Op::delete_key, {"/y"}), {{1, i64(1)}}},
      {"DELETE_KEY, missing", A, req(Op::delete_key, {"/y"}), {{1, i64(0)}}},
      {"NUM_KEYS after", A, req(Op::num_keys), {{1, i64(6)}}},
  });
}

TEST_CASE("keyspace: queues: a non-empty one counts as a key, POP answers the length first",
          "[c10d][keyspace]") {
  run({
      {"QUEUE_LEN of none", A, req(Op::queue_len, {"/q"}), {{1, i64(0)}}},
      {"QUEUE_POP of none: 0 and nothing", A, req(Op::queue_pop, {"/q"}), {{1, i64(0)}}},
      {"QUEUE_PUSH: no answer", A, req(Op::queue_push, {"/q"}, {"one"}), {}},
      {"QUEUE_PUSH", A, req(Op::queue_push, {"/q"}, {"two"}), {}},
      {"CHECK: a queue is there", A, req(Op::check, {"/q"}), {{1, u8(kReady)}}},
      {"NUM_KEYS: queues are not keys", A, req(Op::num_keys), {{1, i64(0)}}},
      {"QUEUE_POP", A, req(Op::queue_pop, {"/q"}), {{1, i64(2) + bytes("one")}}},
      {"QUEUE_LEN", A, req(Op::queue_len, {"/q"}), {{1, i64(1)}}},
      {"QUEUE_POP the last", A, req(Op::queue_pop, {"/q"}), {{1, i64(1) + bytes("two")}}},
      {"CHECK: an emptied queue is gone", A, req(Op::check, {"/q"}), {{1, u8(kNotReady)}}},
      {"A WAITs for a queue", A, req(Op::wait, {"/q2"}), {}},
      {"B WAITs for it too", B, req(Op::wait, {"/q2"}), {}},
      {"one push wakes the first waiter only",
       B,
       req(Op::queue_push, {"/q2"}, {"x"}),
       {{1, u8(kStopWaiting)}}},
      {"the next push wakes the other", A, req(Op::queue_push, {"/q2"}, {"y"}), {{2, u8(kStopWaiting)}}},
  });
}

TEST_CASE("keyspace: WAIT is answered by the write that creates its last key, CANCEL_WAIT drops it",
          "[c10d][keyspace]") {
  run({
      {"WAIT for present keys: at once", A, req(Op::wait, {}), {{1, u8(kStopWaiting)}}},
      {"A WAITs for two keys", A, req(Op::wait, {"/a", "/b"}), {}},
      {"the first key: nothing yet", B, req(Op::set, {"/a"}, {"1"}), {}},
      {"the same key again: nothing", B, req(Op::set, {"/a"}, {"2"}), {}},
      {"the last key, by ADD: B's answer and A's",
       B,
       req(Op::add, {"/b"}, {}, 5),
       {{2, i64(5)}, {1, u8(kStopWaiting)}}},
      {"a COMPARE_SET that writes nothing wakes nobody", A, req(Op::wait, {"/c"}), {}},
      {"... (missing, expected)", B, req(Op::compare_set, {"/c"}, {"x", "y"}), {{2, bytes("x")}}},
      {"... one that writes does",
       B,
       req(Op::compare_set, {"/c"}, {"", "y"}),
       {{2, bytes("y")}, {1, u8(kStopWaiting)}}},
      {"CANCEL_WAIT with nothing pending: WAIT_CANCELED", A, req(Op::cancel_wait), {{1, u8(kWaitCanceled)}}},
      {"A WAITs", A, req(Op::wait, {"/late"}), {}},
      {"CANCEL_WAIT drops it", A, req(Op::cancel_wait), {{1, u8(kWaitCanceled)}}},
      {"the key comes: the cancelled WAIT never fires", B, req(Op::set, {"/late"}, {"x"}), {}},
      {"B WAITs", B, req(Op::wait, {"/gone"}), {}},
      forget("B closes", 2),
      {"the key comes: nothing for B", A, req(Op::set, {"/gone"}, {"x"}), {}},
      {"APPEND wakes a waiter of a new key", A, req(Op::wait, {"/ap"}), {}},
      {"...", B, req(Op::append, {"/ap"}, {"x"}), {{1, u8(kStopWaiting)}}},
  });
}

TEST_CASE("keyspace: a relay's requests are answered in tagged frames, its CANCEL_WAIT names one wait",
          "[c10d][keyspace]") {
  run({
      {"PING", R, tagged(with_u32(Op::ping, 9), 70), {{3, frame(70, u32(9))}}},
      {"ADD", R, tagged(req(Op::add, {"init/"}, {}, 8), 71), {{3, frame(71, i64(8))}}},
      {"a WAIT under tag 72", R, tagged(req(Op::wait, {"/uid"}), 72), {}},
      {"another under tag 73", R, tagged(req(Op::wait, {"/uid", "/g"}), 73), {}},
      {"... and one under 74", R, tagged(req(Op::wait, {"/g"}), 74), {}},
      {"cancel 74 only: no answer (the relay answered its worker)", R, tagged(req(Op::cancel_wait), 74), {}},
      {"a direct client's write completes 72",
       A,
       req(Op::set, {"/uid"}, {"u"}),
       {{3, frame(72, u8(kStopWaiting))}}},
      {"then 73, and 74 stays cancelled", A, req(Op::set, {"/g"}, {"g"}), {{3, frame(73, u8(kStopWaiting))}}},
      {"MULTI_GET",
       R,
       tagged(req(Op::multi_get, {"/uid", "/g"}), 75),
       {{3, frame(75, bytes("u") + bytes("g"))}}},
  });
}

TEST_CASE("keyspace: WATCH_KEY (1.x): created, updated, deleted, to every watcher still there",
          "[c10d][keyspace]") {
  run({
      {"A watches",
       A,
       req(Op::watch_key, {"/w"}),
       {{1, u8(static_cast<std::uint8_t>(WatchEvent::registered))}}},
      {"so does a relay",
       R,
       tagged(req(Op::watch_key, {"/w"}), 5),
       {{3, frame(5, u8(static_cast<std::uint8_t>(WatchEvent::registered)))}}},
      {"created",
       B,
       req(Op::set, {"/w"}, {"a"}),
       {{1, event(WatchEvent::created, "/w", "", "a")},
        {3, frame(5, event(WatchEvent::created, "/w", "", "a"))}}},
      forget("the relay closes", 3),
      {"updated", B, req(Op::set, {"/w"}, {"b"}), {{1, event(WatchEvent::updated, "/w", "a", "b")}}},
      {"updated by APPEND",
       B,
       req(Op::append, {"/w"}, {"c"}),
       {{1, event(WatchEvent::updated, "/w", "b", "bc")}}},
      {"deleted",
       B,
       req(Op::delete_key, {"/w"}),
       {{2, i64(1)}, {1, event(WatchEvent::deleted, "/w", "bc", "")}}},
  });
}

TEST_CASE("keyspace: limits refuse a request and leave the keyspace as it was", "[c10d][keyspace]") {
  KeyspaceLimits l;
  l.max_stored_bytes = 20;
  l.max_reply = 48;
  l.max_waiting = 3;
  run(
      {
          {"11 bytes (key and value)", A, req(Op::set, {"/k"}, {"123456789"}), {}},
          {"11 more do not fit", A, req(Op::set, {"/k2"}, {"1234567890"}), {}, true},
          {"a COMPARE_SET that does not fit is not answered",
           A,
           req(Op::compare_set, {"/k3"}, {"", "1234567890"}),
           {},
           true},
          {"nor an ADD", A, req(Op::add, {"/a-long-counter-key"}, {}, 1), {}, true},
          {"nor a QUEUE_PUSH", A, req(Op::queue_push, {"/q"}, {"1234567890123"}), {}, true},
          {"replacing a value counts the difference", A, req(Op::set, {"/k"}, {"12345678901234567"}), {}},
          {"what is there",
           A,
           req(Op::multi_get, {"/k", "/k2", "/k3"}),
           {{1, bytes("12345678901234567") + bytes("") + bytes("")}}},
          {"DELETE_KEY frees", A, req(Op::delete_key, {"/k"}), {{1, i64(1)}}},
          {"MULTI_GET over max_reply",
           A,
           req(Op::multi_get, {"/1", "/2", "/3", "/4", "/5", "/6", "/7"}),
           {},
           true},
          {"WAIT for 3 keys", A, req(Op::wait, {"/w1", "/w2", "/w3"}), {}},
          {"a 4th awaited key in the store: refused", B, req(Op::wait, {"/w4"}), {}, true},
          forget("A closes: its keys are no longer awaited", 1),
          {"so B may wait", B, req(Op::wait, {"/w4"}), {}},
      },
      l);
}

TEST_CASE("keyspace: a worker holds at most 16 WAITs, a relay a node's worth", "[c10d][keyspace]") {
  std::vector<Row> rows;
  for (int i = 0; i < 16; ++i) rows.push_back({"a WAIT", A, req(Op::wait, {"/never"}), {}});
  rows.push_back({"the 17th: refused", A, req(Op::wait, {"/never"}), {}, true});
  for (std::uint32_t i = 0; i < 100; ++i)
    rows.push_back({"a relay's WAIT", R, tagged(req(Op::wait, {"/never"}), i), {}});
  rows.push_back(
      {"the key: A's 16 and the relay's 100 are answered", B, req(Op::set, {"/never"}, {"x"}), {}});
  std::string a, r;
  for (int i = 0; i < 16; ++i) a += u8(kStopWaiting);
  for (std::uint32_t i = 0; i < 100; ++i) r += frame(i, u8(kStopWaiting));
  rows.back().answers = {{1, a}, {3, r}};
  run(rows);
}
