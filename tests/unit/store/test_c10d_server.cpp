// The workers' store server (store/c10d_server.hpp) against raw clients on loopback, op by op in
// each of torch's layouts: what torch's own servers answer, deferred WAITs, CANCEL_WAIT, errors that
// close one connection only, the fresh keyspace of reset(), the peer filter and the bounds.
#include <catch2/catch.hpp>

#include <algorithm>
#include <mutex>
#include <thread>

#include "store/c10d_server.hpp"
#include "store/error.hpp"
#include "support/c10d_client.hpp"
#include "support/net_util.hpp"

using namespace ddprun::store;
using namespace ddprun::store::c10d;
using namespace std::chrono_literals;
using testnet::C10dClient;

namespace {

C10dServerOptions loopback() {
  C10dServerOptions o;
  o.hosts = {"127.0.0.1"};
  o.log = [](const std::string&) {};
  return o;
}

std::string le64(std::uint64_t v) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>(static_cast<std::uint8_t>(v >> (8 * i))));
  return s;
}

}  // namespace

TEST_CASE("worker store: a 2.2+ client's handshake, PING echoed, ADD init/ counted", "[c10d]") {
  C10dServer s(loopback());
  C10dClient a(s.port(), Layout::v22);
  a.send(Op::ping, {}, {}, 0, 0xDEADBEEF);
  const auto echo = a.read(4);
  REQUIRE(echo);
  CHECK(get_u32(*echo, 0) == 0xDEADBEEF);
  a.send(Op::add, {"init/"}, {}, 1);
  CHECK(a.read_i64() == 1);
  C10dClient b(s.port(), Layout::v22);
  b.send(Op::add, {"init/"}, {}, 1);
  CHECK(b.read_i64() == 2);
  // ADD keeps decimal text, as torch's servers do: a GET reads "2".
  b.send(Op::get, {"init/"});
  CHECK(b.read_bytes() == "2");
}

TEST_CASE("worker store: WAIT is answered when the last key is written, not before", "[c10d]") {
  C10dServer s(loopback());
  C10dClient waiter(s.port(), Layout::v22);
  C10dClient writer(s.port(), Layout::v22);
  waiter.send(Op::wait, {"/a", "/b"});
  CHECK(waiter.silent_for(200ms));
  writer.send(Op::set, {"/a"}, {"1"});
  CHECK(waiter.silent_for(200ms));
  writer.send(Op::add, {"/b"}, {}, 5);
  CHECK(writer.read_i64() == 5);
  CHECK(waiter.read_u8() == kStopWaiting);
  // Keys that exist: at once.
  waiter.send(Op::wait, {"/a"});
  CHECK(waiter.read_u8() == kStopWaiting);
  // The waiter's GET after the wait reads the value (torch's get is WAIT then GET).
  waiter.send(Op::get, {"/a"});
  CHECK(waiter.read_bytes() == "1");
}

TEST_CASE("worker store: CANCEL_WAIT is always answered, and a cancelled WAIT never fires", "[c10d]") {
  C10dServer s(loopback());
  C10dClient a(s.port(), Layout::v22);
  a.send(Op::cancel_wait);
  CHECK(a.read_u8() == kWaitCanceled);
  a.send(Op::wait, {"/late"});
  CHECK(a.silent_for(100ms));
  a.send(Op::cancel_wait);
  CHECK(a.read_u8() == kWaitCanceled);
  C10dClient b(s.port(), Layout::v22);
  b.send(Op::set, {"/late"}, {"x"});
  b.send(Op::get, {"/late"});
  CHECK(b.read_bytes() == "x");
  CHECK(a.silent_for(200ms));
  // 2.1's CANCEL_WAIT is opcode 11.
  C10dClient c(s.port(), Layout::v21);
  c.send(Op::cancel_wait);
  CHECK(c.read_u8() == kWaitCanceled);
}

TEST_CASE("worker store: COMPARE_SET's four cases", "[c10d]") {
  C10dServer s(loopback());
  C10dClient a(s.port(), Layout::v22);
  // Missing, something expected: torch answers `expected` and stores nothing.
  a.send(Op::compare_set, {"/k"}, {"exp", "new"});
  CHECK(a.read_bytes() == "exp");
  a.send(Op::check, {"/k"});
  CHECK(a.read_u8() == kNotReady);
  // Missing, nothing expected: stored.
  a.send(Op::compare_set, {"/k"}, {"", "v1"});
  CHECK(a.read_bytes() == "v1");
  // Present and equal: replaced.
  a.send(Op::compare_set, {"/k"}, {"v1", "v2"});
  CHECK(a.read_bytes() == "v2");
  // Present and different: the current value, unchanged.
  a.send(Op::compare_set, {"/k"}, {"zzz", "v3"});
  CHECK(a.read_bytes() == "v2");
  a.send(Op::get, {"/k"});
  CHECK(a.read_bytes() == "v2");
}

TEST_CASE("worker store: the rest of the 2.2+ ops", "[c10d]") {
  C10dServer s(loopback());
  C10dClient a(s.port(), Layout::v22);
  a.send(Op::get, {"/missing"});
  CHECK(a.read_bytes() == "");  // as torch's libuv server (the legacy one closes)
  a.send(Op::multi_set, {"/x", "/y"}, {"1", "22"});
  a.send(Op::multi_get, {"/x", "/nope", "/y"});
  CHECK(a.read_bytes() == "1");
  CHECK(a.read_bytes() == "");
  CHECK(a.read_bytes() == "22");
  a.send(Op::append, {"/x"}, {"+more"});
  a.send(Op::append, {"/new"}, {"first"});
  a.send(Op::get, {"/x"});
  CHECK(a.read_bytes() == "1+more");
  a.send(Op::num_keys);
  CHECK(a.read_i64() == 3);
  a.send(Op::delete_key, {"/y"});
  CHECK(a.read_i64() == 1);
  a.send(Op::delete_key, {"/y"});
  CHECK(a.read_i64() == 0);
  a.send(Op::list);
  REQUIRE(a.read_i64() == 2);
  std::vector<std::string> keys{*a.read_bytes(), *a.read_bytes()};
  std::sort(keys.begin(), keys.end());
  CHECK(keys == std::vector<std::string>{"/new", "/x"});
  // Queues: pop answers the length before the pop, then the front.
  a.send(Op::queue_len, {"/q"});
  CHECK(a.read_i64() == 0);
  a.send(Op::queue_push, {"/q"}, {"one"});
  a.send(Op::queue_push, {"/q"}, {"two"});
  a.send(Op::check, {"/q"});
  CHECK(a.read_u8() == kReady);  // a non-empty queue counts as an existing key
  a.send(Op::queue_pop, {"/q"});
  CHECK(a.read_i64() == 2);
  CHECK(a.read_bytes() == "one");
  a.send(Op::queue_len, {"/q"});
  CHECK(a.read_i64() == 1);
  // A blocking pop WAITs first; one push wakes one waiter.
  C10dClient w1(s.port(), Layout::v22);
  C10dClient w2(s.port(), Layout::v22);
  // A PING behind each WAIT is answered at once: its echo says the WAIT is registered.
  for (C10dClient* w : {&w1, &w2}) {
    w->send(Op::wait, {"/q2"});
    w->send(Op::ping, {}, {}, 0, 7);
    REQUIRE(w->read(4));
  }
  a.send(Op::queue_push, {"/q2"}, {"only"});
  a.send(Op::num_keys);  // a round trip: the push has been served (queues are not keys)
  CHECK(a.read_i64() == 2);
  const bool first = !w1.silent_for(300ms);
  const bool second = !w2.silent_for(300ms);
  CHECK(first != second);
}

TEST_CASE("worker store: 1.x clients: opcodes 0-8, WATCH_KEY events", "[c10d]") {
  C10dServer s(loopback());
  C10dClient old(s.port(), Layout::v1);
  old.send(Op::add, {"init/"}, {}, 1);
  CHECK(old.read_i64() == 1);
  C10dClient watcher(s.port(), Layout::v1);
  watcher.send(Op::watch_key, {"/w"});
  CHECK(watcher.read_u8() == static_cast<std::uint8_t>(WatchEvent::registered));
  old.send(Op::set, {"/w"}, {"a"});
  old.send(Op::set, {"/w"}, {"b"});
  old.send(Op::delete_key, {"/w"});
  CHECK(old.read_i64() == 1);
  auto event = [&](WatchEvent type, const std::string& before, const std::string& after) {
    CHECK(watcher.read_u8() == static_cast<std::uint8_t>(type));
    CHECK(watcher.read_bytes() == "/w");
    CHECK(watcher.read_bytes() == before);
    CHECK(watcher.read_bytes() == after);
  };
  event(WatchEvent::created, "", "a");
  event(WatchEvent::updated, "a", "b");
  event(WatchEvent::deleted, "b", "");
}

TEST_CASE("worker store: clients of all three layouts share one port and one keyspace", "[c10d]") {
  C10dServer s(loopback());
  C10dClient v1(s.port(), Layout::v1);
  C10dClient v21(s.port(), Layout::v21);
  C10dClient v22(s.port(), Layout::v22);
  v1.send(Op::set, {"/from1"}, {"one"});
  v21.send(Op::multi_get, {"/from1"});  // 2.1's opcode 9
  CHECK(v21.read_bytes() == "one");
  v21.send(Op::delete_key, {"/from1"});  // 2.1's 7: the connection now reads as 2.1
  CHECK(v21.read_i64() == 1);
  v22.send(Op::check, {"/from1"});
  CHECK(v22.read_u8() == kNotReady);
  v22.send(Op::add, {"/n"}, {}, 7);
  CHECK(v22.read_i64() == 7);
  v1.send(Op::add, {"/n"}, {}, 1);
  CHECK(v1.read_i64() == 8);
}

TEST_CASE("worker store: garbage closes that one connection, the others go on", "[c10d]") {
  C10dServer s(loopback());
  C10dClient good(s.port(), Layout::v22);
  good.send(Op::set, {"/k"}, {"v"});
  SECTION("HTTP") {
    C10dClient bad(s.port(), Layout::v1);
    bad.send_raw("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(testnet::closed_by_peer(bad.fd(), 5s));
  }
  SECTION("a 2^62-byte key length") {
    C10dClient bad(s.port(), Layout::v22);
    bad.send_raw(std::string(1, '\x01') + le64(std::uint64_t{1} << 62));
    CHECK(testnet::closed_by_peer(bad.fd(), 5s));
  }
  SECTION("VALIDATE with a wrong magic") {
    C10dClient bad(s.port(), Layout::v1);
    bad.send_raw(std::string("\x00\xce\xf7\x85\x3c", 5) + std::string("\x00\x01\x02\x03\x04", 5));
    CHECK(testnet::closed_by_peer(bad.fd(), 5s));
  }
  SECTION("ADD to a key that holds text") {
    C10dClient bad(s.port(), Layout::v22);
    bad.send(Op::add, {"/k"}, {}, 1);
    CHECK(testnet::closed_by_peer(bad.fd(), 5s));
  }
  good.send(Op::get, {"/k"});
  CHECK(good.read_bytes() == "v");
  CHECK(s.dropped_count() >= 1);
}

TEST_CASE("worker store: reset() gives the next attempt a fresh keyspace", "[c10d]") {
  C10dServer s(loopback());
  const auto port = s.port();
  {
    C10dClient a(port, Layout::v22);
    a.send(Op::set, {"/default_pg/0//cuda//0"}, {std::string(128, 'u')});
    a.send(Op::add, {"init/"}, {}, 1);
    CHECK(a.read_i64() == 1);
    C10dClient w(port, Layout::v22);
    w.send(Op::wait, {"/never"});
    s.reset();
    CHECK(testnet::closed_by_peer(w.fd(), 5s));  // the last attempt's connections are gone
  }
  CHECK(s.port() == port);
  C10dClient b(port, Layout::v22);
  b.send(Op::check, {"/default_pg/0//cuda//0"});
  CHECK(b.read_u8() == kNotReady);
  b.send(Op::add, {"init/"}, {}, 1);
  CHECK(b.read_i64() == 1);
  CHECK(s.key_count() == 1);
}

TEST_CASE("worker store: only peers of the job connect", "[c10d]") {
  C10dServerOptions o = loopback();
  o.hosts = {"0.0.0.0"};
  o.filter_peers = true;
  o.admit_local = false;  // loopback stands for the other nodes here
  std::vector<std::string> lines;
  std::mutex mu;
  o.log = [&](const std::string& l) {
    std::lock_guard lock(mu);
    lines.push_back(l);
  };
  C10dServer s(o);
  s.allow_peers({"127.0.0.2"});
  {
    C10dClient stranger(s.port(), Layout::v22, "127.0.0.1", "127.0.0.3");
    CHECK(testnet::closed_by_peer(stranger.fd(), 5s));
  }
  C10dClient member(s.port(), Layout::v22, "127.0.0.1", "127.0.0.2");
  member.send(Op::add, {"init/"}, {}, 1);
  CHECK(member.read_i64() == 1);
  CHECK(s.refused_count() == 1);
  std::lock_guard lock(mu);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].find("refused 127.0.0.3:") != std::string::npos);
  CHECK(lines[0].find("not an address of this job's nodes") != std::string::npos);
}

TEST_CASE("worker store: a client that never reads is paused, not buffered without end", "[c10d]") {
  C10dServerOptions o = loopback();
  o.max_unsent = 1u << 20;
  C10dServer s(o);
  C10dClient writer(s.port(), Layout::v22);
  writer.send(Op::set, {"/big"}, {std::string(512 * 1024, 'b')});
  writer.send(Op::num_keys);
  CHECK(writer.read_i64() == 1);
  C10dClient greedy(s.port(), Layout::v22);
  const int n = 200;  // 100 MB of answers if all were served
  std::string reqs;
  for (int i = 0; i < n; ++i) {
    Request r;
    r.op = Op::get;
    r.keys = {"/big"};
    reqs += *encode_request(Layout::v22, r);
  }
  std::thread sender([&] { greedy.send_raw(reqs); });
  std::this_thread::sleep_for(500ms);
  // The server stopped reading: far fewer than n GETs were served, and another client is served.
  const auto served = s.request_count();
  CHECK(served < 3 + 40);
  writer.send(Op::get, {"/big"});
  CHECK(writer.read_bytes()->size() == 512 * 1024);
  // Reading resumes it: every answer arrives.
  for (int i = 0; i < n; ++i) {
    const auto v = greedy.read_bytes();
    REQUIRE(v);
    REQUIRE(v->size() == 512 * 1024);
  }
  sender.join();
}

TEST_CASE("worker store: a busy port is one error naming the address", "[c10d]") {
  C10dServer first(loopback());
  C10dServerOptions o = loopback();
  o.port = first.port();
  o.hosts = {"127.0.0.1"};
  // SO_REUSEADDR does not let two listeners share a port.
  try {
    C10dServer second(o);
    FAIL("the second server bound a busy port");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("127.0.0.1:" + std::to_string(first.port())) != std::string::npos);
    CHECK(e.kind() == Error::Kind::address_in_use);  // what WorkerStoreHost tests, never the text
  }
}

TEST_CASE("worker store: the keys a closed client awaited no longer count against max_waiting", "[c10d]") {
  C10dServerOptions o = loopback();
  o.max_waiting = 3;
  C10dServer s(o);
  {
    C10dClient gone(s.port(), Layout::v22);
    gone.send(Op::wait, {"/a", "/b", "/c"});
    gone.send(Op::ping, {}, {}, 0, 1);  // its echo: the WAIT is registered
    REQUIRE(gone.read(4));
  }
  C10dClient next(s.port(), Layout::v22);
  next.send(Op::ping, {}, {}, 0, 2);
  REQUIRE(next.read(4));
  for (int i = 0; i < 1000 && s.connection_count() != 1; ++i) std::this_thread::sleep_for(10ms);
  REQUIRE(s.connection_count() == 1);  // the server has seen the first client go
  next.send(Op::wait, {"/d"});
  CHECK(next.silent_for(200ms));  // waiting, not closed
  C10dClient writer(s.port(), Layout::v22);
  writer.send(Op::set, {"/d"}, {"x"});
  CHECK(next.read_u8() == kStopWaiting);
  CHECK(s.dropped_count() == 0);
}
