// The node-local relay of --worker-store relay (store/c10d_server.hpp): torch clients of every layout
// reach node 0's workers' store through it with the same answers, node 0 sees one connection, identical
// WAITs travel once, CANCEL_WAIT is answered at once and never followed by a late answer, and the
// workers' connections close when node 0's store goes.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
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

struct Pair {
  std::unique_ptr<C10dServer> server;
  std::unique_ptr<C10dRelay> relay;
  Pair() {
    C10dServerOptions so;
    so.hosts = {"127.0.0.1"};
    so.log = [](const std::string&) {};
    server = std::make_unique<C10dServer>(so);
    C10dRelayOptions ro;
    ro.upstream_host = "127.0.0.1";
    ro.upstream_port = server->port();
    ro.log = [](const std::string&) {};
    relay = std::make_unique<C10dRelay>(ro);
  }
};

bool eventually(const std::function<bool()>& f) {
  const auto end = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

}  // namespace

TEST_CASE("relay: clients of every layout get node 0's answers through it", "[c10d][relay]") {
  Pair p;
  C10dClient direct(p.server->port(), Layout::v22);
  C10dClient v22(p.relay->port(), Layout::v22);
  C10dClient v21(p.relay->port(), Layout::v21);
  C10dClient v1(p.relay->port(), Layout::v1);
  v22.send(Op::ping, {}, {}, 0, 99);
  CHECK(get_u32(*v22.read(4), 0) == 99);
  v22.send(Op::add, {"init/"}, {}, 1);
  CHECK(v22.read_i64() == 1);
  v1.send(Op::add, {"init/"}, {}, 1);
  CHECK(v1.read_i64() == 2);
  direct.send(Op::get, {"init/"});
  CHECK(direct.read_bytes() == "2");
  // A WAIT through the relay is answered by a write on node 0.
  v22.send(Op::wait, {"/uid"});
  CHECK(v22.silent_for(200ms));
  direct.send(Op::set, {"/uid"}, {std::string(128, 'u')});
  CHECK(v22.read_u8() == kStopWaiting);
  v22.send(Op::get, {"/uid"});
  CHECK(v22.read_bytes() == std::string(128, 'u'));
  // 2.1's MULTI_GET and DELETE_KEY, 1.x's COMPARE_SET and WATCH_KEY.
  v21.send(Op::multi_get, {"/uid", "init/"});
  CHECK(v21.read_bytes()->size() == 128);
  CHECK(v21.read_bytes() == "2");
  v1.send(Op::compare_set, {"/cs"}, {"", "v"});
  CHECK(v1.read_bytes() == "v");
  C10dClient watcher(p.relay->port(), Layout::v1);
  watcher.send(Op::watch_key, {"/w"});
  CHECK(watcher.read_u8() == static_cast<std::uint8_t>(WatchEvent::registered));
  direct.send(Op::set, {"/w"}, {"x"});
  CHECK(watcher.read_u8() == static_cast<std::uint8_t>(WatchEvent::created));
  CHECK(watcher.read_bytes() == "/w");
  CHECK(watcher.read_bytes() == "");
  CHECK(watcher.read_bytes() == "x");
  v21.send(Op::delete_key, {"/cs"});
  CHECK(v21.read_i64() == 1);
  // Node 0 sees the relay's one connection and its own direct client, not five workers.
  CHECK(p.server->connection_count() == 2);
}

TEST_CASE("relay: CANCEL_WAIT is answered at once and the wait never fires later", "[c10d][relay]") {
  Pair p;
  C10dClient w(p.relay->port(), Layout::v22);
  w.send(Op::wait, {"/never-yet"});
  CHECK(w.silent_for(100ms));
  w.send(Op::cancel_wait);
  CHECK(w.read_u8() == kWaitCanceled);
  C10dClient direct(p.server->port(), Layout::v22);
  direct.send(Op::set, {"/never-yet"}, {"now"});
  direct.send(Op::num_keys);
  CHECK(direct.read_i64() == 1);
  CHECK(w.silent_for(300ms));
  // The connection goes on in step.
  w.send(Op::get, {"/never-yet"});
  CHECK(w.read_bytes() == "now");
}

TEST_CASE("relay: identical WAITs of many workers travel once, every worker is answered", "[c10d][relay]") {
  Pair p;
  std::vector<std::unique_ptr<C10dClient>> ws;
  for (int i = 0; i < 8; ++i) ws.push_back(std::make_unique<C10dClient>(p.relay->port(), Layout::v22));
  for (auto& w : ws) w->send(Op::wait, {"/default_pg/0//cuda//0"});
  REQUIRE(eventually([&] { return p.relay->request_count() == 16; }));  // a VALIDATE and a WAIT each
  CHECK(p.relay->forwarded_count() == 1);
  // One worker gives up: the others still wait on the shared one.
  ws[0]->send(Op::cancel_wait);
  CHECK(ws[0]->read_u8() == kWaitCanceled);
  C10dClient rank0(p.relay->port(), Layout::v22);
  rank0.send(Op::set, {"/default_pg/0//cuda//0"}, {std::string(128, 'n')});
  for (std::size_t i = 1; i < ws.size(); ++i) CHECK(ws[i]->read_u8() == kStopWaiting);
  CHECK(ws[0]->silent_for(200ms));
  // A worker reads its own write at once, whatever GET of another worker is in flight.
  for (auto& w : ws) w->send(Op::get, {"/default_pg/0//cuda//0"});
  rank0.send(Op::set, {"/k"}, {"1"});
  rank0.send(Op::get, {"/k"});
  CHECK(rank0.read_bytes() == "1");
  for (auto& w : ws) CHECK(w->read_bytes()->size() == 128);
}

TEST_CASE("relay: when node 0's store goes, the workers' connections close", "[c10d][relay]") {
  Pair p;
  C10dClient w(p.relay->port(), Layout::v22);
  w.send(Op::add, {"init/"}, {}, 1);
  CHECK(w.read_i64() == 1);
  REQUIRE(p.relay->upstream_connected());
  p.server->stop();
  CHECK(testnet::closed_by_peer(w.fd(), 10s));
  CHECK(eventually([&] { return !p.relay->upstream_connected(); }));
}

TEST_CASE("relay: node 0's store lost is said while workers use it, and not once they have gone",
          "[c10d][relay]") {
  // At every restart node 0 closes its store for the next round, after this node's workers ended.
  std::mutex mu;
  std::vector<std::string> lines;
  C10dServerOptions so;
  so.hosts = {"127.0.0.1"};
  so.log = [](const std::string&) {};
  auto server = std::make_unique<C10dServer>(so);
  C10dRelayOptions ro;
  ro.upstream_host = "127.0.0.1";
  ro.upstream_port = server->port();
  ro.log = [&](const std::string& line) {
    std::lock_guard lk(mu);
    lines.push_back(line);
  };
  C10dRelay relay(ro);
  const auto said = [&] {
    std::lock_guard lk(mu);
    return lines;
  };
  REQUIRE(eventually([&] { return relay.upstream_connected(); }));
  SECTION("a worker connected: the loss is said") {
    C10dClient w(relay.port(), Layout::v22);
    w.send(Op::add, {"init/"}, {}, 1);
    CHECK(w.read_i64() == 1);
    server->stop();
    CHECK(testnet::closed_by_peer(w.fd(), 10s));
    REQUIRE(said().size() == 1);
    CHECK(said().front().find("worker store relay: lost node 0's store at 127.0.0.1:") == 0);
  }
  SECTION("no worker connected (they have ended): nothing is said") {
    server->stop();
    CHECK(eventually([&] { return !relay.upstream_connected(); }));
    CHECK(said().empty());
  }
}

TEST_CASE("relay: a source address it cannot connect from fails the connect instead of another address",
          "[c10d][relay]") {
  C10dServerOptions so;
  so.hosts = {"127.0.0.1"};
  so.log = [](const std::string&) {};
  C10dServer server(so);
  C10dRelayOptions ro;
  ro.upstream_host = "127.0.0.1";
  ro.upstream_port = server.port();
  ro.log = [](const std::string&) {};
  ro.connect_timeout = 0ms;  // give up on the first retry
  SECTION("an address of this machine: connected from it") {
    ro.source_host = "127.0.0.2";
    C10dRelay relay(ro);
    C10dClient w(relay.port(), Layout::v22);
    w.send(Op::add, {"init/"}, {}, 1);
    CHECK(w.read_i64() == 1);
    CHECK(relay.upstream_connected());
  }
  SECTION("one it does not have (TEST-NET-1): node 0 never reached, the worker closed") {
    ro.source_host = "192.0.2.1";
    C10dRelay relay(ro);
    C10dClient w(relay.port(), Layout::v22);
    w.send(Op::add, {"init/"}, {}, 1);
    CHECK(testnet::closed_by_peer(w.fd(), 10s));
    CHECK_FALSE(relay.upstream_connected());
    CHECK(server.connection_count() == 0);
  }
}

TEST_CASE("relay: garbage from one worker closes that worker only", "[c10d][relay]") {
  Pair p;
  C10dClient good(p.relay->port(), Layout::v22);
  C10dClient bad(p.relay->port(), Layout::v1);
  bad.send_raw("GET / HTTP/1.1\r\n\r\n");
  CHECK(testnet::closed_by_peer(bad.fd(), 5s));
  good.send(Op::add, {"n"}, {}, 3);
  CHECK(good.read_i64() == 3);
  CHECK(p.server->dropped_count() == 0);  // nothing of it reached node 0
}

TEST_CASE("relay: a worker beyond the descriptor limit is closed at once and not left waiting",
          "[c10d][relay]") {
  Pair p;
  // Node 0 has taken the relay's connection, and the relay has served a worker (so nothing on either
  // side needs a first descriptor later, sanitizers' runtimes included), before descriptors run short.
  {
    C10dClient first(p.relay->port(), Layout::v22);
    first.send(Op::add, {"init/"}, {}, 1);
    REQUIRE(first.read_i64() == 1);
  }
  REQUIRE(eventually([&] { return p.relay->connection_count() == 0 && p.server->connection_count() == 1; }));
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved) == 0);
  // The workers' sockets exist before the limit drops, so that only the relay runs short; they connect
  // after it. The limit caps descriptor numbers: every hole below the highest one in use is filled
  // first, and then the relay has exactly 2 descriptors for 6 workers.
  std::vector<int> workers;
  for (int i = 0; i < 6; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    workers.push_back(fd);
  }
  int highest = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    highest = std::max(highest, std::stoi(e.path().filename().string()));
  }
  std::vector<int> holes;  // then filled, up to the first descriptor above every one in use
  int top = 0;
  while (top <= highest) {
    top = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    REQUIRE(top >= 0);
    holes.push_back(top);
  }
  rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(top) + 1 + 2;
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(p.relay->port());
  ::inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  for (const int fd : workers) REQUIRE(::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) == 0);
  int closed = 0;
  for (const int fd : workers) closed += testnet::closed_by_peer(fd, 10s) ? 1 : 0;
  ::setrlimit(RLIMIT_NOFILE, &saved);
  for (const int fd : holes) ::close(fd);
  for (const int fd : workers) ::close(fd);
  CHECK(closed >= 1);
  // Once descriptors are free again, a new worker is served.
  C10dClient fresh(p.relay->port(), Layout::v22);
  fresh.send(Op::add, {"init/"}, {}, 1);
  CHECK(fresh.read_i64() == 2);
}

TEST_CASE("relay: a worker that streams requests costs what is not yet a request, not all it ever sent",
          "[c10d][relay]") {
  Pair p;
  C10dClient w(p.relay->port(), Layout::v22);
  // 64 SETs of 256 KiB in one stream (16 MiB), then half of one more: every read of the relay but the
  // last ends inside a request, and the last request never ends.
  Request set;
  set.op = Op::set;
  set.keys = {"/big"};
  set.values = {std::string(256 * 1024, 'v')};
  const std::string one = *encode_request(Layout::v22, set);
  std::string stream;
  for (int i = 0; i < 64; ++i) stream += one;
  stream += one.substr(0, one.size() / 2);
  w.send_raw(stream);
  REQUIRE(eventually([&] { return p.relay->request_count() == 1 + 64; }));  // VALIDATE and the SETs
  // What it holds is about the half request, whatever went before it.
  CHECK(p.relay->buffered_bytes() < 1024 * 1024);
}
