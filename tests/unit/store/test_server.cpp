// The Asio store server and the TcpStore client over loopback.
#include <catch2/catch.hpp>

#include <dirent.h>

#include <algorithm>
#include <map>

#include <fmt/core.h>

#include <atomic>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "store/client.hpp"
#include "store/codec.hpp"
#include "store/error.hpp"
#include "store/server.hpp"
#include "support/net_util.hpp"

using namespace ddprun::store;
using namespace std::chrono_literals;

namespace {

ServerOptions server_opts(const std::string& run_id = "run") {
  ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.run_id = run_id;
  return o;
}

ClientOptions client_opts(std::uint16_t port, const std::string& run_id = "run") {
  ClientOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.run_id = run_id;
  o.connect_timeout = 10s;
  o.op_timeout = 10s;
  return o;
}

// Runs f on a thread and fails (instead of hanging) if it does not finish in time.
template <typename F>
auto bounded(F f, std::chrono::seconds limit = 20s) {
  auto fut = std::async(std::launch::async, std::move(f));
  REQUIRE(fut.wait_for(limit) == std::future_status::ready);
  return fut.get();
}

bool cloexec(int fd) {
  return (::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0;
}

}  // namespace

TEST_CASE("server: every operation over TCP", "[server]") {
  StoreServer server(server_opts());
  REQUIRE(server.port() != 0);
  TcpStore c(client_opts(server.port()));
  c.set("a", std::string("bin\0ary", 7));
  CHECK(c.get("a", 0ms) == std::string("bin\0ary", 7));
  CHECK_FALSE(c.get("missing", 0ms).has_value());
  CHECK(c.add("n", 2) == 2);
  CHECK(c.add("n", 40) == 42);
  CHECK(c.compare_set("cas", "", "one") == "one");
  CHECK(c.compare_set("cas", "", "two") == "one");
  CHECK(c.check({"a", "n"}));
  CHECK_FALSE(c.check({"a", "zzz"}));
  CHECK(c.num_keys() == 3);
  CHECK(c.del("a"));
  CHECK_FALSE(c.del("a"));
  CHECK(c.wait({"n"}, 0ms));
  CHECK(c.wait_any({"x", "cas"}, 0ms) == std::optional<std::size_t>(1));
  c.ping();
  // A server-side error (add on text) is reported and the connection stays usable.
  c.set("text", "abc");
  CHECK_THROWS_AS(c.add("text", 1), Error);
  CHECK(c.get("text", 0ms) == "abc");
}

TEST_CASE("server: a large value read by many peers is always the one written last", "[server]") {
  // The server shares one encoded answer among the gets of a large value; every write, delete
  // or in-process apply must retire it. A set is pipelined: the writer's own next call waits for it,
  // so the writer reads first, then the other peer.
  StoreServer server(server_opts());
  TcpStore a(client_opts(server.port()));
  TcpStore b(client_opts(server.port()));
  const auto big = [](char fill) { return std::string(100000, fill) + "end"; };
  a.set("plan", big('a'));
  CHECK(a.get("plan", 0ms) == big('a'));
  CHECK(b.get("plan", 0ms) == big('a'));
  b.set("plan", big('b'));
  CHECK(b.get("plan", 0ms) == big('b'));
  CHECK(a.get("plan", 0ms) == big('b'));
  CHECK(b.compare_set("plan", big('b'), big('c')) == big('c'));
  CHECK(a.get("plan", 0ms) == big('c'));
  proto::Request q;
  q.op = proto::Op::set;
  q.key = "plan";
  q.value = big('d');
  server.apply(q);
  CHECK(b.get("plan", 0ms) == big('d'));
  CHECK(a.del("plan"));
  CHECK_FALSE(b.get("plan", 0ms).has_value());
  a.set("plan", "small");
  CHECK(a.get("plan", 0ms) == "small");
  CHECK(b.get("plan", 0ms) == "small");
  a.set("plan", big('e'));
  CHECK(a.get("plan", 0ms) == big('e'));
  CHECK(b.get("plan", 0ms) == big('e'));
}

TEST_CASE("server: blocked get/wait are woken by another client's write", "[server]") {
  StoreServer server(server_opts());
  TcpStore waiter(client_opts(server.port()));
  TcpStore writer(client_opts(server.port()));
  auto fut = std::async(std::launch::async, [&] { return waiter.wait({"x", "y"}, 20s); });
  writer.set("x", "1");
  writer.add("y", 1);
  REQUIRE(fut.wait_for(20s) == std::future_status::ready);
  CHECK(fut.get());
  auto g = std::async(std::launch::async, [&] { return waiter.get("late", 20s); });
  writer.set("late", "v");
  REQUIRE(g.wait_for(20s) == std::future_status::ready);
  CHECK(g.get() == "v");
}

TEST_CASE("server: waits time out with a clear result", "[server]") {
  StoreServer server(server_opts());
  TcpStore c(client_opts(server.port()));
  CHECK_FALSE(c.wait({"never"}, 50ms));
  CHECK_FALSE(c.wait_any({"never", "nor"}, 50ms).has_value());
  CHECK_FALSE(c.get("never", 50ms).has_value());
  c.ping();  // still usable afterwards
}

TEST_CASE("server: many client threads against one server", "[server]") {
  StoreServer server(server_opts());
  constexpr int kThreads = 48;
  constexpr int kAdds = 40;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        TcpStore c(client_opts(server.port()));
        c.set("key/" + std::to_string(t), std::string(64, 'x'));
        std::int64_t last = 0;
        for (int i = 0; i < kAdds; ++i) last = c.add("counter", 1);
        if (last == kThreads * kAdds) c.set("done", "1");
        if (!c.wait({"done"}, 30s)) ++failures;
      } catch (const std::exception&) {
        ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(failures == 0);
  TcpStore c(client_opts(server.port()));
  CHECK(c.get("counter", 0ms) == std::to_string(kThreads * kAdds));
  CHECK(c.num_keys() == kThreads + 2);
}

TEST_CASE("server: destroyed mid-request, the client gets an error and does not hang", "[server]") {
  auto server = std::make_unique<StoreServer>(server_opts());
  TcpStore c(client_opts(server->port()));
  auto fut = std::async(std::launch::async, [&]() -> std::string {
    try {
      c.wait({"never"}, 60s);
      return "returned";
    } catch (const Error& e) {
      return e.what();
    }
  });
  std::this_thread::sleep_for(100ms);  // let the wait reach the server (not a timing assertion)
  server.reset();
  REQUIRE(fut.wait_for(20s) == std::future_status::ready);
  const std::string what = fut.get();
  CHECK(what.find("127.0.0.1:") != std::string::npos);
  CHECK(what != "returned");
  // Later calls fail at once.
  CHECK_THROWS_AS(c.ping(), Error);
}

TEST_CASE("client: refused connects are retried and every attempt is listed", "[client]") {
  auto o = client_opts(testnet::unused_port());
  o.connect_timeout = 400ms;
  o.backoff_initial = 20ms;
  try {
    bounded([&] { TcpStore c(o); });
    FAIL("connected to a port nobody listens on");
  } catch (const Error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(e.kind() == Error::Kind::timeout);
    CHECK(what.find(fmt::format("127.0.0.1:{}", o.port)) != std::string::npos);
    CHECK(what.find("Connection refused") != std::string::npos);
    CHECK(what.find("attempts 1-") != std::string::npos);  // retried; identical ones folded
  }
}

TEST_CASE("client: a server that never answers trips the deadline", "[client]") {
  testnet::SilentListener silent;
  auto o = client_opts(silent.port);
  o.connect_timeout = 300ms;
  o.op_timeout = 100ms;
  CHECK_THROWS_AS(bounded([&] {
                    TcpStore c(o);
                    c.ping();
                  }),
                  Error);
  o.wait_for_handshake = true;
  CHECK_THROWS_AS(bounded([&] { TcpStore c(o); }), Error);
}

TEST_CASE("client: the master starting late is waited for", "[client]") {
  const std::uint16_t port = testnet::unused_port();
  auto o = client_opts(port);
  o.connect_timeout = 20s;
  o.backoff_initial = 10ms;
  auto fut = std::async(std::launch::async, [&] {
    TcpStore c(o);
    c.set("k", "v");
    return c.get("k", 0ms);
  });
  std::this_thread::sleep_for(200ms);
  auto so = server_opts();
  so.port = port;
  StoreServer server(so);
  REQUIRE(fut.wait_for(20s) == std::future_status::ready);
  CHECK(fut.get() == "v");
}

TEST_CASE("server: another run id is refused with a clear error, without retrying", "[server]") {
  StoreServer server(server_opts("job-1"));
  auto o = client_opts(server.port(), "job-2");
  try {
    bounded([&] {
      TcpStore c(o);
      c.ping();  // the refusal arrives with the first answer (pipelined handshake)
    });
    FAIL("accepted a client from another run");
  } catch (const Error& e) {
    const std::string what = e.what();
    CHECK(e.kind() == Error::Kind::other_run);
    CHECK(what.find("job-1") != std::string::npos);
    CHECK(what.find("job-2") != std::string::npos);
  }
  // With wait_for_handshake the constructor itself reports it.
  o.wait_for_handshake = true;
  CHECK_THROWS_AS(bounded([&] { TcpStore c(o); }), Error);
  CHECK(server.refused_count() >= 2);
}

TEST_CASE("server: garbage, absurd lengths, HTTP and half-open peers are dropped, others unaffected",
          "[server]") {
  auto so = server_opts();
  so.handshake_timeout = 300ms;
  StoreServer server(so);
  TcpStore good(client_opts(server.port()));
  good.set("before", "1");

  const int http = testnet::raw_connect(server.port());
  const int junk = testnet::raw_connect(server.port());
  const int absurd = testnet::raw_connect(server.port());
  const int silent = testnet::raw_connect(server.port());
  const int partial = testnet::raw_connect(server.port());
  const int pipelined = testnet::raw_connect(server.port());
  for (int fd : {http, junk, absurd, silent, partial, pipelined}) REQUIRE(fd >= 0);
  testnet::send_all(http, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  testnet::send_all(junk, std::string("\x00\x00\x00\x05hello", 9));  // a frame, but no hello
  testnet::send_all(absurd, std::string("\x7f\xff\xff\xff", 4));
  testnet::send_all(partial, std::string("\x00\x00\x00\x40"
                                         "DR",
                                         6));  // then nothing
  // Two requests at once after a valid hello: the protocol allows one at a time.
  {
    ddprun::store::proto::Hello h;
    h.run_id = "run";
    ddprun::store::proto::Request w;
    w.op = ddprun::store::proto::Op::wait;
    w.keys = {"never"};
    w.timeout_ms = 60000;
    testnet::send_all(pipelined, ddprun::store::proto::encode_hello(h) +
                                     ddprun::store::proto::encode_request(w) +
                                     ddprun::store::proto::encode_request(w));
  }

  // The well-behaved client keeps working while all that is going on.
  CHECK(good.add("n", 1) == 1);
  CHECK(good.get("before", 0ms) == "1");

  for (int fd : {http, junk, absurd, silent, partial, pipelined}) {
    CHECK(testnet::closed_by_peer(fd, 10s));
    ::close(fd);
  }
  CHECK(server.dropped_count() >= 6);
  CHECK(good.add("n", 1) == 2);
}

TEST_CASE("server: the connection cap refuses extra peers", "[server]") {
  auto so = server_opts();
  so.max_connections = 2;
  StoreServer server(so);
  TcpStore a(client_opts(server.port()));
  TcpStore b(client_opts(server.port()));
  const int extra = testnet::raw_connect(server.port());
  REQUIRE(extra >= 0);
  CHECK(testnet::closed_by_peer(extra, 10s));
  ::close(extra);
  auto o = client_opts(server.port());
  o.connect_timeout = 200ms;
  o.wait_for_handshake = true;  // the cap closes us during the handshake: retried, then an error
  CHECK_THROWS_AS(TcpStore(o), Error);
  o.wait_for_handshake = false;  // pipelined: the first call fails instead
  CHECK_THROWS_AS(TcpStore(o).ping(), Error);
  a.ping();
  b.ping();
}

TEST_CASE("server: every socket is close-on-exec", "[server]") {
  StoreServer server(server_opts());
  TcpStore c(client_opts(server.port()));
  CHECK(cloexec(c.native_handle()));
  c.ping();
  // Every socket of this process (listener, accepted, client) must carry FD_CLOEXEC.
  int sockets = 0;
  DIR* d = ::opendir("/proc/self/fd");
  REQUIRE(d != nullptr);
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string path = std::string("/proc/self/fd/") + e->d_name;
    char target[256] = {};
    const ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
    if (n <= 0 || std::string(target).rfind("socket:", 0) != 0) continue;
    const int fd = std::stoi(e->d_name);
    INFO("fd " << fd << " " << target);
    CHECK(cloexec(fd));
    ++sockets;
  }
  ::closedir(d);
  CHECK(sockets >= 3);
}

TEST_CASE("server: a labelled peer that stops heart-beating or disconnects is reported lost", "[server]") {
  std::mutex mu;
  std::vector<std::pair<std::string, std::string>> lost;
  auto so = server_opts();
  so.on_lost = [&](const std::string& label, const std::string& reason) {
    std::lock_guard lk(mu);
    lost.emplace_back(label, reason);
  };
  StoreServer server(so);
  auto quiet_opts = client_opts(server.port());
  quiet_opts.label = "agent/0/1";
  quiet_opts.liveness = 200ms;
  TcpStore quiet(quiet_opts);  // sends nothing after the handshake
  auto bye_opts = client_opts(server.port());
  bye_opts.label = "agent/0/2";
  auto bye = std::make_unique<TcpStore>(bye_opts);
  bye->ping();
  bye.reset();
  TcpStore unlabelled(client_opts(server.port()));
  unlabelled.close();

  const auto deadline = std::chrono::steady_clock::now() + 10s;
  for (;;) {
    {
      std::lock_guard lk(mu);
      if (lost.size() >= 2) break;
    }
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(10ms);
  }
  std::lock_guard lk(mu);
  REQUIRE(lost.size() == 2);  // the unlabelled one is not reported
  std::map<std::string, std::string> by(lost.begin(), lost.end());
  CHECK(by.at("agent/0/1").find("heartbeat") != std::string::npos);
  CHECK(by.at("agent/0/2").find("closed") != std::string::npos);
  CHECK_THROWS_AS(quiet.ping(), Error);
}

TEST_CASE("server: labels() names the labelled peers connected now", "[server]") {
  StoreServer server(server_opts());
  auto labelled = [&](const std::string& label) {
    auto o = client_opts(server.port());
    o.label = label;
    auto c = std::make_unique<TcpStore>(o);
    c->ping();  // the hello is pipelined: answered once this returns
    return c;
  };
  auto a1 = labelled("agent/0/1");
  auto a10 = labelled("agent/0/10");
  auto m = labelled("main/1");
  TcpStore unlabelled(client_opts(server.port()));
  unlabelled.ping();
  auto got = server.labels("agent/0/");
  std::sort(got.begin(), got.end());
  CHECK(got == std::vector<std::string>{"agent/0/1", "agent/0/10"});
  CHECK(server.labelled_count("agent/") == 2);
  CHECK(server.labels("main/") == std::vector<std::string>{"main/1"});
  a10.reset();
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (server.labels("agent/").size() != 1) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(10ms);
  }
  CHECK(server.labels("agent/") == std::vector<std::string>{"agent/0/1"});
  server.stop();
  CHECK(server.labels("").empty());
}

TEST_CASE("client: oversized keys are refused before sending", "[client]") {
  StoreServer server(server_opts());
  TcpStore c(client_opts(server.port()));
  CHECK_THROWS_AS(c.set(std::string(5000, 'k'), "v"), Error);
  c.ping();
}

TEST_CASE("server: cannot listen on a busy port: one clear line", "[server]") {
  StoreServer first(server_opts());
  auto so = server_opts();
  so.port = first.port();
  try {
    StoreServer second(so);
    FAIL("two servers on one port");
  } catch (const Error& e) {
    const std::string what = e.what();
    CHECK(what.find(std::to_string(first.port())) != std::string::npos);
    CHECK(what.find("in use") != std::string::npos);
    CHECK(e.kind() == Error::Kind::address_in_use);  // what callers test, never the text
  }
}

TEST_CASE("server: the idle timeout closes silent connections after the handshake", "[server]") {
  auto so = server_opts();
  so.idle_timeout = 200ms;
  StoreServer server(so);
  TcpStore c(client_opts(server.port()));
  c.ping();
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (server.connection_count() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  CHECK(server.connection_count() == 0);
  CHECK_THROWS_AS(c.ping(), Error);
}

TEST_CASE("server: a peer that never reads its answers does not stall anyone", "[server]") {
  StoreServer server(server_opts());
  TcpStore writer(client_opts(server.port()));
  writer.set("big", std::string(8u << 20, 'b'));  // 8 MiB: far more than the socket buffers
  const int lazy = testnet::raw_connect(server.port());
  REQUIRE(lazy >= 0);
  ddprun::store::proto::Hello h;
  h.run_id = "run";
  ddprun::store::proto::Request g;
  g.op = ddprun::store::proto::Op::get;
  g.key = "big";
  testnet::send_all(lazy, ddprun::store::proto::encode_hello(h) + ddprun::store::proto::encode_request(g));
  // A second peer pipelines many requests without reading: it is dropped, not buffered for.
  const int flood = testnet::raw_connect(server.port());
  REQUIRE(flood >= 0);
  {
    ddprun::store::proto::Request small;
    small.op = ddprun::store::proto::Op::get;
    small.key = "mid";
    writer.set("mid", std::string(1u << 20, 'm'));  // 64 x 1 MiB: more than any socket buffers
    writer.flush();                                 // the flood's gets must find it
    std::string burst = ddprun::store::proto::encode_hello(h);
    for (int i = 0; i < 64; ++i) burst += ddprun::store::proto::encode_request(small);
    std::thread sender([flood, burst] { testnet::send_all(flood, burst); });
    CHECK(testnet::hung_up(flood, 20s));
    ::shutdown(flood, SHUT_RDWR);  // unblocks the sender whatever happened
    sender.join();
  }
  // `lazy` never reads; the server must keep serving the others meanwhile.
  auto fut = std::async(std::launch::async, [&] {
    TcpStore other(client_opts(server.port()));
    for (int i = 0; i < 100; ++i) other.add("n", 1);
    return other.get("n", 0ms);
  });
  REQUIRE(fut.wait_for(20s) == std::future_status::ready);
  CHECK(fut.get() == "100");
  ::close(lazy);
  ::close(flood);
}

TEST_CASE("client: a set is pipelined, yet reaches the store and reports failure", "[client]") {
  StoreServer server(server_opts());
  TcpStore reader(client_opts(server.port()));
  {
    // The writer ends right behind its sets: its destructor waits for the acknowledgements.
    TcpStore writer(client_opts(server.port()));
    for (int i = 0; i < 10; ++i) writer.set(fmt::format("k{}", i), std::to_string(i));
  }
  for (int i = 0; i < 10; ++i) CHECK(reader.get(fmt::format("k{}", i), 0ms) == std::to_string(i));

  // Read-your-writes on one connection, with no flush in between.
  TcpStore c(client_opts(server.port()));
  c.set("mine", "1");
  CHECK(c.get("mine", 0ms) == "1");
  c.set("n", "not a number");
  CHECK_THROWS_AS(c.add("n", 1), Error);  // the add's own error, after the set's ack was read

  // A refused hello behind a pipelined set surfaces from the next call (or flush), and the set
  // is never executed.
  TcpStore stranger(client_opts(server.port(), "other-run"));
  stranger.set("intruder", "x");
  try {
    stranger.flush();
    FAIL("flush should report the refusal");
  } catch (const Error& e) {
    CHECK(e.kind() == Error::Kind::other_run);
    CHECK_THAT(e.what(), Catch::Contains("run id mismatch"));
  }
  CHECK_FALSE(reader.get("intruder", 0ms).has_value());
}

TEST_CASE("client: a connection idle after connecting is not mistaken for a half-open one", "[client]") {
  // The hello is held back to travel with the first request, but only briefly: a client that
  // makes no call for longer than the handshake timeout must still be served.
  auto so = server_opts();
  so.handshake_timeout = 1s;
  StoreServer server(so);
  TcpStore c(client_opts(server.port()));
  std::this_thread::sleep_for(1500ms);
  CHECK_NOTHROW(c.ping());
  CHECK(server.dropped_count() == 0);
}

TEST_CASE("server: pipelined requests are answered in order, large values included", "[server]") {
  StoreServer server(server_opts());
  const int fd = testnet::raw_connect(server.port());
  REQUIRE(fd >= 0);
  proto::Hello h;
  h.run_id = "run";
  std::string burst = proto::encode_hello(h);
  const std::string big(3u << 20, 'z');  // larger than the server's read buffers
  std::vector<proto::Request> qs;
  for (int i = 0; i < 50; ++i) {
    proto::Request q;
    q.op = i % 2 == 0 ? proto::Op::set : proto::Op::add;
    q.key = i % 2 == 0 ? fmt::format("key{}", i) : "counter";
    q.value = i == 10 ? big : fmt::format("v{}", i);
    q.number = 1;
    burst += proto::encode_request(q);
  }
  proto::Request g;
  g.op = proto::Op::get;
  g.key = "key10";
  burst += proto::encode_request(g);
  std::thread sender([fd, burst] { testnet::send_all(fd, burst); });
  proto::FrameParser parser(64u << 20);
  std::vector<proto::Response> answers;
  std::vector<char> buf(1 << 16);
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (answers.size() < 52 && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 1000) <= 0) continue;
    const ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n <= 0) break;
    parser.feed(std::string_view(buf.data(), static_cast<std::size_t>(n)));
    while (auto payload = parser.next()) answers.push_back(proto::decode_response(*payload, {}));
  }
  sender.join();
  ::close(fd);
  REQUIRE(answers.size() == 52);  // hello + 50 requests + get
  CHECK(answers[0].status == proto::Status::ok);
  for (std::size_t i = 0; i < 50; ++i) {
    CHECK(answers[i + 1].status == proto::Status::ok);
    // The counter counts up in request order.
    if (i % 2 == 1) CHECK(answers[i + 1].number == static_cast<std::int64_t>((i + 1) / 2));
  }
  CHECK(answers[51].value == big);
}
