// The wire codec on byte strings: round trips, and every kind of bad input a port scanner or a
// broken peer can send.
#include <catch2/catch.hpp>

#include "store/codec.hpp"
#include "store/error.hpp"

using namespace ddprun::store;
using namespace ddprun::store::proto;

namespace {

// Splits one whole frame into its payload, checking the header.
std::string payload_of(const std::string& frame) {
  FrameParser p(1 << 20);
  p.feed(frame);
  auto out = p.next();
  REQUIRE(out.has_value());
  REQUIRE(p.buffered() == 0);
  return *out;
}

bool is_protocol_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind() == Error::Kind::protocol;
  }
  return false;
}

}  // namespace

TEST_CASE("codec: hello round trip and header layout", "[codec]") {
  Hello h;
  h.run_id = "job-42";
  h.label = "agent/0/3";
  h.liveness_ms = 5000;
  const std::string frame = encode_hello(h);
  // Big-endian length, then the magic "DRDV".
  REQUIRE(frame.size() > 8);
  CHECK(static_cast<unsigned char>(frame[0]) == 0);
  CHECK(frame.substr(4, 4) == "DRDV");
  const Hello back = decode_hello(payload_of(frame));
  CHECK(back.magic == kMagic);
  CHECK(back.version == kVersion);
  CHECK(back.run_id == "job-42");
  CHECK(back.label == "agent/0/3");
  CHECK(back.liveness_ms == 5000);
}

TEST_CASE("codec: every request op round trips", "[codec]") {
  std::vector<Request> reqs;
  Request r;
  r.op = Op::set, r.key = "k", r.value = std::string("v\0x", 3);
  reqs.push_back(r);
  r = {}, r.op = Op::get, r.key = "k", r.timeout_ms = 1234;
  reqs.push_back(r);
  r = {}, r.op = Op::add, r.key = "ctr", r.number = -7;
  reqs.push_back(r);
  r = {}, r.op = Op::compare_set, r.key = "k", r.value = "", r.value2 = "new";
  reqs.push_back(r);
  r = {}, r.op = Op::check, r.keys = {"a", "b"};
  reqs.push_back(r);
  r = {}, r.op = Op::del, r.key = "a";
  reqs.push_back(r);
  r = {}, r.op = Op::num_keys;
  reqs.push_back(r);
  r = {}, r.op = Op::wait, r.keys = {"a"}, r.timeout_ms = 99;
  reqs.push_back(r);
  r = {}, r.op = Op::wait_any, r.keys = {"x", "y", "z"}, r.timeout_ms = 1;
  reqs.push_back(r);
  r = {}, r.op = Op::ping;
  reqs.push_back(r);
  r = {}, r.op = Op::heartbeat;
  reqs.push_back(r);
  r = {}, r.op = Op::heartbeat, r.number = 1;  // pong wanted
  reqs.push_back(r);
  r = {}, r.op = Op::heartbeat, r.number = 0x0c;  // reserved bits, kept as sent
  reqs.push_back(r);
  r = {}, r.op = Op::watch, r.key = "agent/0/3", r.number = 12000, r.keys = {"/attempt_0/abort"};
  reqs.push_back(r);
  r = {}, r.op = Op::watch, r.key = "main/3";  // unwatch: no liveness, no keys
  reqs.push_back(r);
  for (const auto& q : reqs) {
    INFO(to_string(q.op));
    const Request back = decode_request(payload_of(encode_request(q)));
    CHECK(back.op == q.op);
    CHECK(back.key == q.key);
    CHECK(back.value == q.value);
    CHECK(back.value2 == q.value2);
    CHECK(back.number == q.number);
    CHECK(back.timeout_ms == q.timeout_ms);
    CHECK(back.keys == q.keys);
  }
}

TEST_CASE("codec: a heartbeat is 6 bytes on the wire and its pong is one shared out-of-band frame",
          "[codec]") {
  Request h;
  h.op = Op::heartbeat;
  CHECK(encode_request(h) == std::string("\0\0\0\2\x0c\0", 6));
  h.number = 1;  // a pong wanted
  CHECK(encode_request(h) == std::string("\0\0\0\2\x0c\1", 6));
  const Response pong = decode_response(payload_of(pong_frame()));
  CHECK(pong.status == Status::pong);
  CHECK(out_of_band(pong.status));
  CHECK(out_of_band(Status::event));
  CHECK_FALSE(out_of_band(Status::ok));
  CHECK(&pong_frame() == &pong_frame());
}

TEST_CASE("codec: response round trip", "[codec]") {
  Response s{Status::timeout, -42, "some value"};
  const Response back = decode_response(payload_of(encode_response(s)));
  CHECK(back.status == Status::timeout);
  CHECK(back.number == -42);
  CHECK(back.value == "some value");
}

TEST_CASE("codec: the parser reassembles frames fed one byte at a time", "[codec]") {
  Request a;
  a.op = Op::set, a.key = "alpha", a.value = std::string(1000, 'x');
  Request b;
  b.op = Op::ping;
  const std::string stream = encode_request(a) + encode_request(b);
  FrameParser p(1 << 20);
  std::vector<std::string> got;
  for (char ch : stream) {
    p.feed(std::string_view(&ch, 1));
    while (auto f = p.next()) got.push_back(*f);
  }
  REQUIRE(got.size() == 2);
  CHECK(decode_request(got[0]).value == a.value);
  CHECK(decode_request(got[1]).op == Op::ping);
  CHECK(p.buffered() == 0);
}

TEST_CASE("codec: truncated frames wait for more bytes, truncated payloads are errors", "[codec]") {
  Request q;
  q.op = Op::set, q.key = "key", q.value = "value";
  const std::string frame = encode_request(q);
  for (std::size_t cut = 0; cut < frame.size(); ++cut) {
    FrameParser p(1 << 20);
    p.feed(std::string_view(frame).substr(0, cut));
    CHECK_FALSE(p.next().has_value());
  }
  // A payload whose inner fields run past its end.
  const std::string payload = payload_of(frame);
  for (std::size_t cut = 0; cut < payload.size(); ++cut) {
    INFO("cut at " << cut);
    CHECK(is_protocol_error([&] { decode_request(std::string_view(payload).substr(0, cut)); }));
  }
  CHECK(is_protocol_error([&] { decode_request(payload + "x"); }));  // trailing bytes
}

TEST_CASE("codec: absurd and empty length prefixes are rejected before buffering", "[codec]") {
  FrameParser p(1024);
  p.feed(std::string("\xff\xff\xff\xff", 4));
  CHECK(is_protocol_error([&] { p.next(); }));
  FrameParser z(1024);
  z.feed(std::string(4, '\0'));
  CHECK(is_protocol_error([&] { z.next(); }));
  FrameParser edge(1024);
  edge.feed(std::string("\x00\x00\x04\x01", 4));  // 1025 > cap
  CHECK(is_protocol_error([&] { edge.next(); }));
}

TEST_CASE("codec: an HTTP request is not a frame", "[codec]") {
  const std::string http = "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
  FrameParser p(kMaxHelloSize);
  p.feed(http);
  // "GET " read as a length is about 1.2 GB: over any cap.
  CHECK(is_protocol_error([&] { p.next(); }));
  // And as a payload, it is not a hello.
  CHECK(is_protocol_error([&] { decode_hello(http); }));
}

TEST_CASE("codec: a hello with the wrong magic or oversized fields is refused", "[codec]") {
  Hello h;
  h.run_id = "r";
  std::string payload = payload_of(encode_hello(h));
  std::string bad_magic = payload;
  bad_magic[0] = 'X';
  CHECK(is_protocol_error([&] { decode_hello(bad_magic); }));
  Limits l;
  l.max_id = 8;
  h.run_id = std::string(9, 'r');
  CHECK(is_protocol_error([&] { decode_hello(payload_of(encode_hello(h)), l); }));
}

TEST_CASE("codec: key, value and key-count caps", "[codec]") {
  Limits l;
  l.max_key = 4;
  l.max_value = 8;
  l.max_keys_per_request = 2;
  Request q;
  q.op = Op::set, q.key = "12345", q.value = "v";
  CHECK(is_protocol_error([&] { decode_request(payload_of(encode_request(q)), l); }));
  q.key = "1234", q.value = std::string(9, 'v');
  CHECK(is_protocol_error([&] { decode_request(payload_of(encode_request(q)), l); }));
  q.value = std::string(8, 'v');
  CHECK(decode_request(payload_of(encode_request(q)), l).value.size() == 8);
  Request w;
  w.op = Op::wait, w.keys = {"a", "b", "c"};
  CHECK(is_protocol_error([&] { decode_request(payload_of(encode_request(w)), l); }));
  w.keys = {};
  CHECK(is_protocol_error([&] { decode_request(payload_of(encode_request(w)), l); }));
}

TEST_CASE("codec: unknown ops and statuses, and random garbage never crash", "[codec]") {
  CHECK(is_protocol_error([] { decode_request(std::string(1, '\x7f')); }));
  CHECK(is_protocol_error([] { decode_request(std::string(1, '\x01')); }));  // hello op is not a request
  CHECK(is_protocol_error([] { decode_response(std::string("\x09", 1) + std::string(12, '\0')); }));
  // Deterministic pseudo-random payloads: decoding either succeeds or throws Error, nothing else.
  std::uint32_t x = 12345;
  for (int i = 0; i < 2000; ++i) {
    std::string junk;
    const int n = static_cast<int>(x % 64);
    for (int k = 0; k < n; ++k) {
      x = x * 1664525u + 1013904223u;
      junk.push_back(static_cast<char>(x >> 24));
    }
    x = x * 1664525u + 1013904223u;
    for (auto f : {+[](std::string_view s) { (void)decode_request(s); },
                   +[](std::string_view s) { (void)decode_response(s); },
                   +[](std::string_view s) { (void)decode_hello(s); }}) {
      try {
        f(junk);
      } catch (const Error& e) {
        CHECK(e.kind() == Error::Kind::protocol);
      }
    }
  }
}
