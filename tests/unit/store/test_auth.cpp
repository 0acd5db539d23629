// Authentication of store connections: pure pieces, the server/client pair, and MUNGE against a
// private munged started by the test.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "store/auth.hpp"
#include "store/client.hpp"
#include "store/codec.hpp"
#include "store/error.hpp"
#include "store/server.hpp"
#include "support/net_util.hpp"

using namespace ddprun::store;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

std::string hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    out.push_back(d[c >> 4]);
    out.push_back(d[c & 15]);
  }
  return out;
}

struct Scratch {
  fs::path path;
  Scratch() {
    std::string tmpl = (fs::temp_directory_path() / "ddprun-auth-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  fs::path write(const std::string& name, const std::string& text, fs::perms mode) {
    const fs::path p = path / name;
    std::ofstream(p) << text;
    fs::permissions(p, mode);
    return p;
  }
};

auth::Config token_cfg(const std::string& token) {
  auth::Config c;
  c.mode = auth::Mode::token;
  c.token = token;
  return c;
}

// Collects the server's rejected-peer lines.
struct LogSink {
  std::mutex m;
  std::vector<std::string> lines;
  std::function<void(const std::string&)> fn() {
    return [this](const std::string& l) {
      std::lock_guard<std::mutex> g(m);
      lines.push_back(l);
    };
  }
  std::string all() {
    std::lock_guard<std::mutex> g(m);
    std::string s;
    for (const auto& l : lines) s += l + "\n";
    return s;
  }
};

ServerOptions server_with(auth::Config cfg, LogSink& sink) {
  ServerOptions o;
  o.host = "127.0.0.1";
  o.run_id = "run-a";
  o.auth = std::move(cfg);
  o.log = sink.fn();
  return o;
}

ClientOptions client_with(std::uint16_t port, auth::Config cfg, const std::string& label) {
  ClientOptions o;
  o.port = port;
  o.run_id = "run-a";
  o.label = label;
  o.auth = std::move(cfg);
  o.connect_timeout = 10s;
  o.op_timeout = 10s;
  o.wait_for_handshake = true;
  return o;
}

std::string rejection(const ClientOptions& o) {
  try {
    TcpStore c(o);
    c.ping();
  } catch (const Error& e) {
    CHECK(e.kind() == Error::Kind::rejected);
    return e.what();
  }
  return "accepted";
}

}  // namespace

TEST_CASE("auth: constant-time compare is a correct equality", "[auth]") {
  CHECK(auth::constant_time_equal("", ""));
  CHECK(auth::constant_time_equal("abc", "abc"));
  CHECK_FALSE(auth::constant_time_equal("abc", "abd"));
  CHECK_FALSE(auth::constant_time_equal("abc", "xbc"));
  CHECK_FALSE(auth::constant_time_equal("abc", "abcd"));
  CHECK_FALSE(auth::constant_time_equal("abc", ""));
  const std::string a(32, '\0');
  std::string b = a;
  CHECK(auth::constant_time_equal(a, b));
  for (std::size_t i = 0; i < b.size(); ++i) {
    b = a;
    b[i] = '\x80';
    CHECK_FALSE(auth::constant_time_equal(a, b));
  }
}

TEST_CASE("auth: HMAC-SHA256 matches RFC 4231 test case 2", "[auth]") {
  CHECK(hex(auth::hmac_sha256("Jefe", "what do ya want for nothing?")) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

// Keys shorter than, as long as, and longer than SHA-256's 64-byte block (a long key is hashed first).
TEST_CASE("auth: HMAC-SHA256 matches RFC 4231 test cases 1 and 6, and a block-sized key", "[auth]") {
  CHECK(hex(auth::hmac_sha256(std::string(20, '\x0b'), "Hi There")) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK(hex(auth::hmac_sha256(std::string(131, '\xaa'),
                              "Test Using Larger Than Block-Size Key - Hash Key First")) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  // Python's hmac.new(b"k" * 64, b"", hashlib.sha256).
  CHECK(hex(auth::hmac_sha256(std::string(64, 'k'), "")) ==
        "83026a325aaee70e36cfe607536aa1054104ad1077c36134810d4ccded1ccd3b");
}

TEST_CASE("auth: nonces are 16 random bytes, different each time", "[auth]") {
  const std::string a = auth::random_nonce();
  const std::string b = auth::random_nonce();
  CHECK(a.size() == 16u);
  CHECK(b.size() == 16u);
  CHECK(a != b);
}

TEST_CASE("auth: policy parsing and mode choice", "[auth]") {
  using auth::Mode;
  using auth::Policy;
  CHECK(auth::parse_policy("auto") == Policy::automatic);
  CHECK(auth::parse_policy("none") == Policy::none);
  CHECK_THROWS_WITH(auth::parse_policy("yes"), Catch::Contains("auto|munge|token|none"));
  const auto means = [](bool munge, bool token) {
    auth::Means m;
    m.munge_usable = munge;
    m.have_token = token;
    return m;
  };
  CHECK(auth::choose_mode(Policy::automatic, means(true, true)) == Mode::munge);
  CHECK(auth::choose_mode(Policy::automatic, means(false, true)) == Mode::token);
  CHECK(auth::choose_mode(Policy::automatic, means(false, false)) == Mode::none);
  CHECK(auth::choose_mode(Policy::token, means(true, true)) == Mode::token);
  CHECK(auth::choose_mode(Policy::none, means(true, true)) == Mode::none);
  CHECK_THROWS_WITH(auth::choose_mode(Policy::token, means(true, false)), Catch::Contains("DDPRUN_TOKEN"));
  CHECK_THROWS_WITH(auth::choose_mode(Policy::munge, means(false, true)), Catch::Contains("munged"));
}

TEST_CASE("auth: a missing libmunge or libcrypto fails only what needs it, naming it", "[auth]") {
  using auth::Mode;
  using auth::Policy;
  auth::Means m;
  m.no_munge = "MUNGE authentication needs libmunge.so.2, which could not be loaded (x)";
  m.no_hmac = "token authentication needs libcrypto.so.3 or libcrypto.so.1.1 (OpenSSL) for HMAC-SHA256 (x)";
  // Nothing that needs them: unchanged.
  CHECK(auth::choose_mode(Policy::none, m) == Mode::none);
  CHECK(auth::choose_mode(Policy::automatic, m) == Mode::none);
  // What needs them: one line naming the library, after the option.
  CHECK_THROWS_WITH(auth::choose_mode(Policy::munge, m),
                    Catch::StartsWith("--rdzv-auth munge: MUNGE") && Catch::Contains("libmunge.so.2"));
  m.have_token = true;
  CHECK_THROWS_WITH(auth::choose_mode(Policy::token, m),
                    Catch::StartsWith("--rdzv-auth token: token") && Catch::Contains("libcrypto.so.3"));
  // auto with a token given never drops it for an open store.
  CHECK_THROWS_WITH(auth::choose_mode(Policy::automatic, m),
                    Catch::StartsWith("--rdzv-auth auto: token") && Catch::Contains("libcrypto.so.3"));
  // MUNGE answering still wins under auto; no token needs no HMAC.
  m.munge_usable = true;
  CHECK(auth::choose_mode(Policy::automatic, m) == Mode::munge);
  m.munge_usable = false;
  m.have_token = false;
  CHECK_THROWS_WITH(auth::choose_mode(Policy::token, m), Catch::Contains("no token given"));
}

TEST_CASE("auth: this machine's libcrypto and libmunge are found and named", "[auth]") {
  // The build machine has both (scripts/setup.sh: libssl3, libmunge2): loaded at run time, not linked.
  const auto crypto = auth::crypto_library();
  INFO(crypto.error);
  CHECK(crypto.found);
  CHECK_THAT(crypto.name, Catch::StartsWith("libcrypto.so."));
  CHECK(crypto.error.empty());
  const auto munge = auth::munge_library();
  INFO(munge.error);
  CHECK(munge.found == auth::munge_built());
  if (auth::munge_built()) CHECK(munge.name == "libmunge.so.2");
}

TEST_CASE("auth: token verifier accepts the right token once and nothing else", "[auth]") {
  auth::Verifier v(token_cfg("s3cret"), "run-a");
  const std::string nonce = auth::random_nonce();
  const std::string good = auth::token_credential("s3cret", "run-a", "agent/0/1", nonce);
  CHECK_FALSE(v.check(auth::Mode::token, good, "agent/0/1").has_value());
  // The exact same credential again: a replay.
  CHECK_THAT(v.check(auth::Mode::token, good, "agent/0/1").value_or(""), Catch::Contains("replayed"));
  // Wrong token, wrong run id, or a credential moved to another label.
  const std::string n2 = auth::random_nonce();
  CHECK_THAT(v.check(auth::Mode::token, auth::token_credential("other", "run-a", "l", n2), "l").value_or(""),
             Catch::Contains("wrong token"));
  CHECK(v.check(auth::Mode::token, auth::token_credential("s3cret", "run-b", "l", n2), "l"));
  CHECK(v.check(auth::Mode::token, auth::token_credential("s3cret", "run-a", "l", n2), "m"));
  CHECK(v.check(auth::Mode::token, "short", "l"));
  // No credential at all, or another mechanism.
  CHECK_THAT(v.check(auth::Mode::none, "", "l").value_or(""), Catch::Contains("authentication required"));
  CHECK_THAT(v.check(auth::Mode::munge, "MUNGE:xyz", "l").value_or(""), Catch::Contains("mode mismatch"));
  // A fresh nonce with the right token still works after all those failures.
  CHECK_FALSE(
      v.check(auth::Mode::token, auth::token_credential("s3cret", "run-a", "l", auth::random_nonce()), "l"));
}

TEST_CASE("auth: none mode refuses a client that brings a credential", "[auth]") {
  auth::Verifier v(auth::Config{}, "run-a");
  CHECK_FALSE(v.check(auth::Mode::none, "", "l").has_value());
  CHECK_THAT(v.check(auth::Mode::token, "x", "l").value_or(""), Catch::Contains("mode mismatch"));
}

TEST_CASE("auth: token file must be private and non-empty", "[auth]") {
  Scratch s;
  const auto ok = s.write("tok", "  hunter2-long-secret\n", fs::perms::owner_read | fs::perms::owner_write);
  CHECK(auth::read_token_file(ok.string()) == "hunter2-long-secret");
  const auto ro = s.write("tok_ro", "abc", fs::perms::owner_read);
  CHECK(auth::read_token_file(ro.string()) == "abc");
  const auto open = s.write(
      "tok644", "abc",
      fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read);
  CHECK_THROWS_WITH(auth::read_token_file(open.string()),
                    Catch::Contains("0644") && Catch::Contains("chmod 600"));
  const auto empty = s.write("empty", "\n", fs::perms::owner_read | fs::perms::owner_write);
  CHECK_THROWS_WITH(auth::read_token_file(empty.string()), Catch::Contains("empty"));
  CHECK_THROWS_WITH(auth::read_token_file((s.path / "missing").string()),
                    Catch::Contains("missing") && Catch::Contains("--rdzv-token-file"));
  // A symbolic link is followed, and the file it leads to is what is checked.
  fs::create_symlink(ok, s.path / "link_ok");
  CHECK(auth::read_token_file((s.path / "link_ok").string()) == "hunter2-long-secret");
  fs::create_symlink(open, s.path / "link_open");
  CHECK_THROWS_WITH(auth::read_token_file((s.path / "link_open").string()),
                    Catch::Contains("0644") && Catch::Contains("chmod 600"));
  // Not a regular file (a FIFO): refused at once, without waiting for a writer.
  REQUIRE(::mkfifo((s.path / "fifo").c_str(), 0600) == 0);
  CHECK_THROWS_WITH(auth::read_token_file((s.path / "fifo").string()), Catch::Contains("not a regular file"));
  // resolve(): the token text wins over the file; policy none reads nothing.
  const auth::Config c = auth::resolve(auth::Policy::token, std::nullopt, ok.string(), "/nonexistent");
  CHECK(c.mode == auth::Mode::token);
  CHECK(c.token == "hunter2-long-secret");
  CHECK(auth::resolve(auth::Policy::none, std::nullopt, open.string(), "").mode == auth::Mode::none);
  CHECK_THROWS_WITH(auth::resolve(auth::Policy::automatic, std::nullopt, open.string(), "/nonexistent"),
                    Catch::Contains("chmod 600"));
}

TEST_CASE("auth: rejected-peer log is rate limited and counts what it skipped", "[auth]") {
  auth::LogLimiter lim(3, 10s);
  const auto t0 = auth::LogLimiter::Clock::now();
  CHECK(lim.allow(t0));
  CHECK(lim.allow(t0 + 1ms));
  CHECK(lim.allow(t0 + 2ms));
  for (int i = 0; i < 100; ++i) CHECK_FALSE(lim.allow(t0 + 3ms));
  CHECK(lim.allow(t0 + 11s));
  CHECK(lim.take_suppressed() == 100);
  CHECK(lim.take_suppressed() == 0);
}

TEST_CASE("auth: token store serves the right token and drops everyone else", "[auth][server]") {
  LogSink sink;
  StoreServer server(server_with(token_cfg("tok-1"), sink));
  TcpStore good(client_with(server.port(), token_cfg("tok-1"), "good"));
  good.set("k", "v");

  CHECK_THAT(rejection(client_with(server.port(), token_cfg("tok-2"), "intruder")),
             Catch::Contains("wrong token"));
  CHECK_THAT(rejection(client_with(server.port(), auth::Config{}, "anon")),
             Catch::Contains("authentication required"));
  // A raw hello without credential: dropped before any request behind it runs.
  const int fd = testnet::raw_connect(server.port());
  REQUIRE(fd >= 0);
  proto::Hello h;
  h.run_id = "run-a";
  h.label = "raw";
  proto::Request q;
  q.op = proto::Op::set;
  q.key = "k";
  q.value = "evil";
  testnet::send_all(fd, proto::encode_hello(h) + proto::encode_request(q));
  CHECK(testnet::closed_by_peer(fd, 10s));
  ::close(fd);

  // The authenticated client never noticed, and the intruders wrote nothing.
  CHECK(good.get("k", 0ms).value_or("") == "v");
  CHECK(server.refused_count() == 3);
  const std::string log = sink.all();
  CHECK_THAT(log, Catch::Contains("rejected peer 127.0.0.1:") && Catch::Contains("'intruder'") &&
                      Catch::Contains("'anon'") && Catch::Contains("'raw'"));
}

TEST_CASE("auth: a peer that does not speak the protocol is named in the log, rate-limited",
          "[auth][server]") {
  LogSink sink;
  StoreServer server(server_with(token_cfg("tok-1"), sink));
  // An HTTP client (a browser, a scanner, a scraper pointed at the wrong port), several times.
  for (int i = 0; i < 8; ++i) {
    const int fd = testnet::raw_connect(server.port());
    REQUIRE(fd >= 0);
    testnet::send_all(fd, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(testnet::closed_by_peer(fd, 10s));
    ::close(fd);
  }
  // A port scan's connect-and-close says nothing at all: no line for it.
  const int quiet = testnet::raw_connect(server.port());
  REQUIRE(quiet >= 0);
  ::close(quiet);
  TcpStore good(client_with(server.port(), token_cfg("tok-1"), "good"));
  good.set("k", "v");  // the server is as it was
  const std::string log = sink.all();
  INFO(log);
  CHECK_THAT(log, Catch::Contains("rejected peer 127.0.0.1:") && Catch::Contains("not the ddprun protocol"));
  std::size_t lines = 0;
  for (std::size_t at = log.find("rejected peer"); at != std::string::npos;
       at = log.find("rejected peer", at + 1)) {
    ++lines;
  }
  CHECK(lines >= 1);
  CHECK(lines <= 5);  // at most 5 lines per 10 s: the others are counted, not printed
}

TEST_CASE("auth: a replayed token hello is refused", "[auth][server]") {
  LogSink sink;
  StoreServer server(server_with(token_cfg("tok-1"), sink));
  proto::Hello h;
  h.run_id = "run-a";
  h.label = "agent/0/1";
  h.auth = static_cast<std::uint8_t>(auth::Mode::token);
  h.credential = auth::token_credential("tok-1", "run-a", "agent/0/1", auth::random_nonce());
  const std::string frame = proto::encode_hello(h);
  auto answer = [&] {
    const int fd = testnet::raw_connect(server.port());
    REQUIRE(fd >= 0);
    const timeval tv{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    testnet::send_all(fd, frame);
    char buf[512];
    std::string got;
    while (got.size() < 4) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      got.append(buf, static_cast<std::size_t>(n));
    }
    // Read the whole response frame.
    std::size_t need = got.size() >= 4
                           ? 4 + ((static_cast<std::size_t>(static_cast<unsigned char>(got[2])) << 8) |
                                  static_cast<unsigned char>(got[3]))
                           : 0;
    while (got.size() < need) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      got.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fd);
    REQUIRE(got.size() > 4);
    return proto::decode_response(std::string_view(got).substr(4));
  };
  CHECK(answer().status == proto::Status::ok);
  const proto::Response second = answer();
  CHECK(second.status == proto::Status::error);
  CHECK_THAT(second.value, Catch::Contains("replayed"));
}

// ---- MUNGE, against a private munged (root not needed; only the munged binary).

namespace {

struct PrivateMunged {
  Scratch dir;
  std::string socket;
  bool up = false;
  PrivateMunged() {
    socket = (dir.path / "munge.sock").string();
    {
      std::ofstream key(dir.path / "munge.key", std::ios::binary);
      std::ifstream rnd("/dev/urandom", std::ios::binary);
      std::vector<char> k(1024);
      rnd.read(k.data(), static_cast<std::streamsize>(k.size()));
      key.write(k.data(), static_cast<std::streamsize>(k.size()));
    }
    fs::permissions(dir.path / "munge.key", fs::perms::owner_read | fs::perms::owner_write);
    const std::string cmd = "munged --force --socket='" + socket + "' --key-file='" +
                            (dir.path / "munge.key").string() + "' --pid-file='" +
                            (dir.path / "munged.pid").string() + "' --log-file='" +
                            (dir.path / "munged.log").string() + "' --seed-file='" +
                            (dir.path / "munged.seed").string() + "' >/dev/null 2>&1";
    up = std::system(cmd.c_str()) == 0;
    for (int i = 0; up && i < 200 && !auth::munge_usable(socket); ++i) {
      std::this_thread::sleep_for(25ms);
    }
    up = up && auth::munge_usable(socket);
  }
  ~PrivateMunged() {
    std::ifstream pidf(dir.path / "munged.pid");
    long pid = 0;
    if (pidf >> pid && pid > 1) ::kill(static_cast<pid_t>(pid), SIGTERM);
    for (int i = 0; i < 100 && pid > 1 && ::kill(static_cast<pid_t>(pid), 0) == 0; ++i) {
      std::this_thread::sleep_for(20ms);
    }
  }
};

bool have_munged() {
  return ::access("/usr/sbin/munged", X_OK) == 0 || ::access("/usr/bin/munged", X_OK) == 0;
}

}  // namespace

TEST_CASE("auth: MUNGE credentials bind uid and run id and are single use", "[auth][munge]") {
  if (!have_munged()) {
    WARN("munged is not installed: MUNGE authentication not tested here");
    return;
  }
  PrivateMunged munged;
  REQUIRE(munged.up);  // installed but cannot start: a real failure of the test environment
  auth::Config cfg;
  cfg.mode = auth::Mode::munge;
  cfg.munge_socket = munged.socket;

  auth::Verifier v(cfg, "run-a");
  const std::string cred = auth::munge_credential("run-a", munged.socket);
  CHECK_THAT(cred, Catch::StartsWith("MUNGE:"));
  CHECK_FALSE(v.check(auth::Mode::munge, cred, "l").has_value());
  CHECK_THAT(v.check(auth::Mode::munge, cred, "l").value_or(""), Catch::Contains("replayed"));
  CHECK_THAT(v.check(auth::Mode::munge, auth::munge_credential("run-b", munged.socket), "l").value_or(""),
             Catch::Contains("another run id"));
  CHECK(v.check(auth::Mode::munge, "MUNGE:garbage:", "l").has_value());
  CHECK_THAT(v.check(auth::Mode::token, auth::token_credential("t", "run-a", "l", auth::random_nonce()), "l")
                 .value_or(""),
             Catch::Contains("mode mismatch"));

  // The policy picks MUNGE when munged answers, and a store with it works end to end.
  CHECK(auth::resolve(auth::Policy::automatic, std::string("tok"), std::nullopt, munged.socket).mode ==
        auth::Mode::munge);
  LogSink sink;
  StoreServer server(server_with(cfg, sink));
  TcpStore a(client_with(server.port(), cfg, "a"));
  TcpStore b(client_with(server.port(), cfg, "b"));
  a.set("k", "1");
  a.flush();  // set is pipelined: acknowledged (so visible to b) once flushed
  CHECK(b.get("k", 0ms).value_or("") == "1");
  CHECK_THAT(rejection(client_with(server.port(), token_cfg("tok"), "tokenuser")),
             Catch::Contains("mode mismatch"));
  CHECK_THAT(sink.all(), Catch::Contains("'tokenuser'"));
}

TEST_CASE("auth: munge policy without munged is a one-line usage error", "[auth][munge]") {
  CHECK_FALSE(auth::munge_usable("/nonexistent/munge.sock"));
  CHECK_THROWS_WITH(auth::resolve(auth::Policy::munge, std::nullopt, std::nullopt, "/nonexistent/munge.sock"),
                    Catch::Contains("munged is not reachable"));
  // A client configured for MUNGE whose munged is gone fails with a clear error, not a hang.
  auth::Config cfg;
  cfg.mode = auth::Mode::munge;
  cfg.munge_socket = "/nonexistent/munge.sock";
  CHECK_THROWS_WITH(auth::make_credential(cfg, "run", "l"), Catch::Contains("MUNGE credential"));
}

TEST_CASE("auth: the hello carries mode and credential, and a version-1 hello is refused by version",
          "[auth][codec]") {
  proto::Hello h;
  h.run_id = "run-a";
  h.label = "l";
  h.auth = 2;
  h.credential = std::string("\0\1cred", 6);
  const std::string f = proto::encode_hello(h);
  const proto::Hello back = proto::decode_hello(std::string_view(f).substr(proto::kHeaderSize));
  CHECK(back.auth == 2);
  CHECK(back.credential == h.credential);
  h.credential = std::string(proto::kMaxCredential + 1, 'x');
  const std::string big = proto::encode_hello(h);
  CHECK_THROWS_AS(proto::decode_hello(std::string_view(big).substr(proto::kHeaderSize)), Error);

  LogSink sink;
  StoreServer server(server_with(auth::Config{}, sink));
  proto::Hello old;
  old.version = 1;
  old.run_id = "run-a";
  const int fd = testnet::raw_connect(server.port());
  REQUIRE(fd >= 0);
  const timeval tv{10, 0};  // a broken server must fail this test, not hang it
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  testnet::send_all(fd, proto::encode_hello(old));
  std::string got;
  char buf[512];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  REQUIRE(got.size() > proto::kHeaderSize);
  const proto::Response r = proto::decode_response(std::string_view(got).substr(proto::kHeaderSize));
  CHECK(r.status == proto::Status::error);
  CHECK_THAT(r.value, Catch::Contains("protocol version 1 is not supported"));
}

TEST_CASE("auth: a peer cannot inject lines into the master's log", "[auth][server]") {
  LogSink sink;
  StoreServer server(server_with(token_cfg("tok-1"), sink));
  auth::Config none;
  CHECK_THAT(rejection(client_with(server.port(), none, "evil\nddprun: forged line")),
             Catch::Contains("authentication required"));
  const std::string log = sink.all();
  CHECK_THAT(log, Catch::Contains("'evil?ddprun: forged line'"));
  CHECK(std::count(log.begin(), log.end(), '\n') == 1);
}

TEST_CASE("auth: the store keeps the refused hellos, each kind once with its count, bounded",
          "[auth][server]") {
  LogSink sink;
  StoreServer server(server_with(token_cfg("tok-1"), sink));
  CHECK(server.refusals().empty());
  for (int i = 0; i < 3; ++i) {
    CHECK_THAT(rejection(client_with(server.port(), token_cfg("tok-2"), "main/1")),
               Catch::Contains("wrong token"));
  }
  CHECK_THAT(rejection(client_with(server.port(), auth::Config{}, "bad\nlabel")),
             Catch::Contains("authentication required"));
  TcpStore good(client_with(server.port(), token_cfg("tok-1"), "main/0"));
  good.set("k", "v");
  auto r = server.refusals();
  REQUIRE(r.size() == 2);
  CHECK(r[0].peer == "127.0.0.1");
  CHECK(r[0].label == "main/1");
  CHECK(r[0].count == 3);
  CHECK_THAT(r[0].why, Catch::StartsWith("authentication failed: wrong token"));
  CHECK(r[1].label == "bad?label");  // a peer's label, made safe for one line
  CHECK(r[1].count == 1);
  // Many different peers' labels: only the first kMaxRefusalsKept are kept; refused_count() counts all.
  for (int i = 0; i < 12; ++i)
    rejection(client_with(server.port(), token_cfg("tok-2"), "x" + std::to_string(i)));
  CHECK(server.refusals().size() == kMaxRefusalsKept);
  CHECK(server.refused_count() == 16);
  const std::string long_label(200, 'l');  // within the hello's 256-byte limit
  StoreServer other(server_with(token_cfg("tok-1"), sink));
  rejection(client_with(other.port(), token_cfg("tok-2"), long_label));
  REQUIRE(other.refusals().size() == 1);
  CHECK(other.refusals()[0].label.size() == kMaxRefusalLabel);
}
