// One connection per agent: heartbeats beside a blocked call, pushed events, the master's
// in-process store, and the connection cap that follows RLIMIT_NOFILE.
#include <catch2/catch.hpp>

#include <sys/resource.h>

#include <thread>

#include "store/client.hpp"
#include "store/codec.hpp"
#include "store/error.hpp"
#include "store/limits.hpp"
#include "store/server.hpp"
#include "support/net_util.hpp"

using namespace ddprun::store;
namespace proto = ddprun::store::proto;
using namespace std::chrono_literals;

namespace {

ServerOptions opts() {
  ServerOptions so;
  so.host = "127.0.0.1";
  so.run_id = "run";
  return so;
}

ClientOptions copts(std::uint16_t port) {
  ClientOptions co;
  co.port = port;
  co.run_id = "run";
  co.connect_timeout = 5s;
  co.op_timeout = 10s;
  return co;
}

// Polls until `n` events came or 10 s passed.
std::vector<TcpStore::Event> events_of(TcpStore& c, std::size_t n) {
  std::vector<TcpStore::Event> all;
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (all.size() < n && std::chrono::steady_clock::now() < until) {
    for (auto& e : c.poll_events(100ms)) all.push_back(std::move(e));
  }
  return all;
}

}  // namespace

TEST_CASE("watch: a key's writes are pushed to every watcher, also one written before the watch", "[watch]") {
  StoreServer server(opts());
  TcpStore writer(copts(server.port()));
  writer.set("early", "1");
  std::vector<std::unique_ptr<TcpStore>> watchers;
  for (int i = 0; i < 8; ++i) {
    watchers.push_back(std::make_unique<TcpStore>(copts(server.port())));
    watchers.back()->watch("agent/0/" + std::to_string(i), 0ms, {"early", "abort"});
  }
  CHECK(server.labelled_count("agent/0/") == 8);
  CHECK(writer.compare_set("abort", "", "cause") == "cause");
  for (auto& w : watchers) {
    const auto ev = events_of(*w, 2);
    REQUIRE(ev.size() == 2);
    CHECK(ev[0].index == 0);
    CHECK(ev[0].value == "1");
    CHECK(ev[1].index == 1);
    CHECK(ev[1].value == "cause");
  }
}

TEST_CASE("watch: heartbeats flow while a wait is blocked on the same connection, and keep it alive",
          "[watch]") {
  StoreServer server(opts());
  TcpStore c(copts(server.port()));
  c.watch("agent/0/1", 600ms, {"abort"});
  std::atomic<bool> stop{false};
  std::thread beats([&] {
    while (!stop.load()) {
      c.heartbeat();
      (void)c.poll_events(100ms);
    }
  });
  // Blocked for three liveness periods: only the heartbeats keep the connection.
  CHECK_FALSE(c.wait({"never"}, 2s));
  const auto heard = c.last_heard();
  stop = true;
  beats.join();
  CHECK(std::chrono::steady_clock::now() - heard < 1s);  // pongs came during the wait
  CHECK(server.dropped_count() == 0);
  CHECK(c.add("n", 1) == 1);  // in-order answers are untouched by the pongs
}

TEST_CASE("watch: a watcher that stops heartbeating is dropped and reported by its label", "[watch]") {
  std::mutex mu;
  std::vector<std::string> lost;
  auto so = opts();
  so.on_lost = [&](const std::string& label, const std::string&) {
    std::lock_guard lk(mu);
    lost.push_back(label);
  };
  StoreServer server(so);
  TcpStore c(copts(server.port()));
  c.watch("agent/0/2", 300ms, {});
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (server.connection_count() > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(20ms);
  std::lock_guard lk(mu);
  CHECK(lost == std::vector<std::string>{"agent/0/2"});
}

TEST_CASE("watch: the master's in-process store sees and wakes what the connections see", "[watch]") {
  StoreServer server(opts());
  TcpStore c(copts(server.port()));
  c.watch("agent/0/1", 0ms, {"abort"});
  ServerStore local(server);
  CHECK(local.compare_set("abort", "", "lost") == "lost");
  const auto ev = events_of(c, 1);
  REQUIRE(ev.size() == 1);
  CHECK(ev[0].value == "lost");
  CHECK(c.get("abort", 0ms) == std::optional<std::string>("lost"));
  CHECK(local.check({"abort"}));
}

TEST_CASE("limits: the connection cap follows RLIMIT_NOFILE and keeps a reserve", "[limits]") {
  CHECK(wanted_soft_limit({1024, 20000}) == 20000);
  CHECK(wanted_soft_limit({4096, 4096}) == 4096);
  CHECK(wanted_soft_limit({1024, RLIM_INFINITY}) == (1u << 20));
  CHECK(connection_cap(1024) == 1024 - 256 - 64);
  CHECK(connection_cap(20000) == 20000 - 256 - 1250);
  CHECK(connection_cap(100) == 1);
  CHECK(connection_cap(1u << 20) > 16384 * 8);  // per-task mode's worst case fits a raised limit
  const std::string m = connection_limit_message(768, {1024, 4096});
  CHECK(m.find("768") != std::string::npos);
  CHECK(m.find("RLIMIT_NOFILE 1024") != std::string::npos);
  CHECK(m.find("ulimit -n") != std::string::npos);
}

TEST_CASE("limits: a server without a cap raises the soft limit and caps by it", "[limits]") {
  StoreServer server(opts());
  rlimit r{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &r) == 0);
  CHECK(r.rlim_cur == wanted_soft_limit({r.rlim_cur, r.rlim_max}));
  CHECK(server.connection_limit() == connection_cap(r.rlim_cur));
}

TEST_CASE("limits: a peer over the cap is told the limit and the fix", "[limits]") {
  auto so = opts();
  so.max_connections = 1;
  StoreServer server(so);
  TcpStore a(copts(server.port()));
  a.ping();
  auto o = copts(server.port());
  o.wait_for_handshake = true;
  try {
    TcpStore b(o);
    FAIL("the second connection was accepted");
  } catch (const Error& e) {
    CHECK(e.kind() == Error::Kind::rejected);
    CHECK(std::string(e.what()).find("ulimit -n") != std::string::npos);
  }
  a.ping();
}

TEST_CASE("watch: a new watch drops what was pushed for the keys watched before it", "[watch]") {
  // A standby waited in attempt 0's round while node 0 aborted attempt 0: that abort must not reach the
  // watch of attempt 1, which it then joins on the same connection.
  StoreServer server(opts());
  TcpStore writer(copts(server.port()));
  TcpStore watcher(copts(server.port()));
  watcher.watch("agent/0/4", 0ms, {"0/abort"});
  writer.set("0/abort", "attempt 0's cause");
  CHECK(writer.get("0/abort", 0ms) == "attempt 0's cause");  // the server has it, and has pushed it
  // A call after the push reads it first and sets it aside, as the standby's wait for the plan does.
  CHECK(watcher.add("0/count", 1) == 1);
  watcher.watch("agent/1/4", 0ms, {"1/abort"});
  CHECK(watcher.poll_events(300ms).empty());
  // The new watch still hears its own keys: a value there before it, and later writes.
  writer.set("1/abort", "attempt 1's cause");
  const auto ev = events_of(watcher, 1);
  REQUIRE(ev.size() == 1);
  CHECK(ev[0].index == 0);
  CHECK(ev[0].value == "attempt 1's cause");
}

TEST_CASE("watch: only bit 0 of a heartbeat's flags asks for a pong, the reserved bits are ignored",
          "[watch]") {
  StoreServer server(opts());
  const int fd = testnet::raw_connect(server.port());
  REQUIRE(fd >= 0);
  proto::Hello h;
  h.run_id = "run";
  proto::Request reserved_only, pong_too, ping;
  reserved_only.op = pong_too.op = proto::Op::heartbeat;
  reserved_only.number = 0x0c;
  pong_too.number = 0x0d;
  ping.op = proto::Op::ping;
  testnet::send_all(fd, proto::encode_hello(h) + proto::encode_request(reserved_only) +
                            proto::encode_request(pong_too) + proto::encode_request(ping));
  proto::FrameParser parser(1 << 16);
  std::vector<proto::Status> seen;
  char buf[4096];
  const auto until = std::chrono::steady_clock::now() + 10s;
  // The ping's ok is the last answer: the server answers in order and pongs at once.
  while ((seen.size() < 2 || seen.back() != proto::Status::ok) && std::chrono::steady_clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    parser.feed(std::string_view(buf, static_cast<std::size_t>(n)));
    while (auto payload = parser.next()) seen.push_back(proto::decode_response(*payload, {}).status);
  }
  ::close(fd);
  CHECK(seen == std::vector<proto::Status>{proto::Status::ok, proto::Status::pong, proto::Status::ok});
  CHECK(server.dropped_count() == 0);
}
