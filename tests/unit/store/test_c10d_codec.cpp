// PyTorch's TCPStore wire protocol (store/c10d_codec.hpp): the opcode of every op in every layout,
// the opening that tells a 2.2+ client from an older one, the legacy rule between 1.x-2.0 and 2.1,
// requests split at every byte, and every limit.
#include <catch2/catch.hpp>

#include <map>

#include "store/c10d_codec.hpp"
#include "store/error.hpp"

using namespace ddprun::store;
using namespace ddprun::store::c10d;

namespace {

// The enums of torch's sources, transcribed: QueryType of 1.13 (TCPStore.cpp), of 2.1
// (TCPStoreBackend.hpp before VALIDATE) and of 2.2 and later (VALIDATE first, PING 2.5, QUEUE_* 2.8,
// LIST 2.10).
const std::map<Op, std::map<Layout, int>> kTable = {
    {Op::validate, {{Layout::v1, -1}, {Layout::v21, -1}, {Layout::v22, 0}}},
    {Op::set, {{Layout::v1, 0}, {Layout::v21, 0}, {Layout::v22, 1}}},
    {Op::compare_set, {{Layout::v1, 1}, {Layout::v21, 1}, {Layout::v22, 2}}},
    {Op::get, {{Layout::v1, 2}, {Layout::v21, 2}, {Layout::v22, 3}}},
    {Op::add, {{Layout::v1, 3}, {Layout::v21, 3}, {Layout::v22, 4}}},
    {Op::check, {{Layout::v1, 4}, {Layout::v21, 4}, {Layout::v22, 5}}},
    {Op::wait, {{Layout::v1, 5}, {Layout::v21, 5}, {Layout::v22, 6}}},
    {Op::num_keys, {{Layout::v1, 6}, {Layout::v21, 6}, {Layout::v22, 7}}},
    {Op::watch_key, {{Layout::v1, 7}, {Layout::v21, -1}, {Layout::v22, -1}}},
    {Op::delete_key, {{Layout::v1, 8}, {Layout::v21, 7}, {Layout::v22, 8}}},
    {Op::append, {{Layout::v1, -1}, {Layout::v21, 8}, {Layout::v22, 9}}},
    {Op::multi_get, {{Layout::v1, -1}, {Layout::v21, 9}, {Layout::v22, 10}}},
    {Op::multi_set, {{Layout::v1, -1}, {Layout::v21, 10}, {Layout::v22, 11}}},
    {Op::cancel_wait, {{Layout::v1, -1}, {Layout::v21, 11}, {Layout::v22, 12}}},
    {Op::ping, {{Layout::v1, -1}, {Layout::v21, -1}, {Layout::v22, 13}}},
    {Op::queue_push, {{Layout::v1, -1}, {Layout::v21, -1}, {Layout::v22, 14}}},
    {Op::queue_pop, {{Layout::v1, -1}, {Layout::v21, -1}, {Layout::v22, 15}}},
    {Op::queue_len, {{Layout::v1, -1}, {Layout::v21, -1}, {Layout::v22, 16}}},
    {Op::list, {{Layout::v1, -1}, {Layout::v21, -1}, {Layout::v22, 17}}},
};

bool protocol_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind() == Error::Kind::protocol && std::string(e.what()).find('\n') == std::string::npos;
  }
  return false;
}

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (const int x : b) s.push_back(static_cast<char>(x));
  return s;
}

std::string le64(std::uint64_t v) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>(static_cast<std::uint8_t>(v >> (8 * i))));
  return s;
}

// Every request the stream holds, fed `step` bytes at a time the way a connection buffers them.
std::vector<Request> parse_all(const std::string& stream, std::size_t step, Parser& p) {
  std::vector<Request> out;
  std::string held;
  for (std::size_t pos = 0; pos < stream.size(); pos += step) {
    held += stream.substr(pos, step);
    std::string_view in(held);
    while (in.size() >= p.needed()) {
      auto q = p.next(in);
      if (!q) break;
      out.push_back(std::move(*q));
    }
    held.erase(0, held.size() - in.size());
  }
  return out;
}

const std::string kValidate = bytes({0x00, 0xCE, 0xF7, 0x85, 0x3C});

}  // namespace

TEST_CASE("c10d codec: the opcode of every op in every layout", "[c10d]") {
  REQUIRE(kTable.size() == kOpCount);
  for (const auto& [op, row] : kTable) {
    for (const auto& [layout, code] : row) {
      INFO(to_string(op) << " in torch " << to_string(layout));
      if (code < 0) {
        CHECK_FALSE(encode_op(layout, op).has_value());
      } else {
        REQUIRE(encode_op(layout, op).has_value());
        CHECK(*encode_op(layout, op) == code);
        CHECK(decode_op(layout, static_cast<std::uint8_t>(code)) == op);
      }
    }
  }
  // Nothing past each table's end means anything.
  CHECK_FALSE(decode_op(Layout::v1, 9).has_value());
  CHECK_FALSE(decode_op(Layout::v21, 12).has_value());
  CHECK_FALSE(decode_op(Layout::v22, 18).has_value());
  CHECK_FALSE(decode_op(Layout::v22, 255).has_value());
}

TEST_CASE("c10d codec: the bytes of torch's handshake and of its first ADD", "[c10d]") {
  // A 2.2+ client: VALIDATE, PING with its pid, ADD "init/" 1 (torch's TestClientProtocol bytes).
  Request ping;
  ping.op = Op::ping;
  ping.u32 = 0x01020304;
  CHECK(*encode_request(Layout::v22, ping) == bytes({13, 4, 3, 2, 1}));
  Request add;
  add.op = Op::add;
  add.keys = {"init/"};
  add.number = 1;
  CHECK(*encode_request(Layout::v22, add) == bytes({4}) + le64(5) + "init/" + le64(1));
  CHECK(*encode_request(Layout::v1, add) == bytes({3}) + le64(5) + "init/" + le64(1));
  Request v;
  v.op = Op::validate;
  v.u32 = kValidateMagic;
  CHECK(*encode_request(Layout::v22, v) == kValidate);
}

TEST_CASE("c10d codec: the opening tells a 2.2+ client, a relay and an older client apart", "[c10d]") {
  CHECK(sniff("") == std::nullopt);
  CHECK(sniff(bytes({0x00, 0xCE})) == std::nullopt);  // could still be VALIDATE
  CHECK(sniff(kValidate) == Opening::v22);
  CHECK(sniff(bytes({0xDD, 0x44, 0x44, 0x50, 0x52})) == Opening::relay);
  // 1.x's first request, ADD "init/": opcode 3.
  CHECK(sniff(bytes({3, 5, 0})) == Opening::legacy);
  // A legacy SET (opcode 0) of a 5-byte key: the length is not the magic.
  CHECK(sniff(bytes({0, 5, 0, 0, 0})) == Opening::legacy);
  CHECK(sniff("GET / HTTP/1.1\r\n") == Opening::legacy);
}

TEST_CASE("c10d codec: each request parses the same split at any byte", "[c10d]") {
  std::vector<Request> sent;
  auto add = [&](Op op, std::vector<std::string> keys, std::vector<std::string> values, std::int64_t n = 0,
                 std::uint32_t u = 0) {
    Request r;
    r.op = op;
    r.keys = std::move(keys);
    r.values = std::move(values);
    r.number = n;
    r.u32 = u;
    sent.push_back(r);
  };
  add(Op::validate, {}, {}, 0, kValidateMagic);
  add(Op::ping, {}, {}, 0, 4242);
  add(Op::set, {"/k"}, {std::string("v\0\xff", 3)});
  add(Op::compare_set, {"/k"}, {"old", "new"});
  add(Op::get, {"/k"}, {});
  add(Op::add, {"init/"}, {}, -3);
  add(Op::check, {"/a", "/b"}, {});
  add(Op::wait, {"/a"}, {});
  add(Op::num_keys, {}, {});
  add(Op::delete_key, {"/a"}, {});
  add(Op::append, {"/a"}, {"xyz"});
  add(Op::multi_get, {"/a", "", "/c"}, {});
  add(Op::multi_set, {"/a", "/b"}, {"1", ""});
  add(Op::cancel_wait, {}, {});
  add(Op::queue_push, {"/q"}, {"item"});
  add(Op::queue_pop, {"/q"}, {});
  add(Op::queue_len, {"/q"}, {});
  add(Op::list, {}, {});
  add(Op::check, {}, {});  // an empty list
  std::string stream;
  for (const auto& r : sent) stream += *encode_request(Layout::v22, r);
  for (const std::size_t step :
       {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{7}, stream.size()}) {
    INFO("step " << step);
    Parser p;
    const auto got = parse_all(stream, step, p);
    REQUIRE(got.size() == sent.size());
    CHECK(p.layout() == Layout::v22);
    for (std::size_t i = 0; i < sent.size(); ++i) {
      INFO(to_string(sent[i].op));
      CHECK(got[i].op == sent[i].op);
      CHECK(got[i].keys == sent[i].keys);
      CHECK(got[i].values == sent[i].values);
      CHECK(got[i].number == sent[i].number);
      CHECK(got[i].u32 == sent[i].u32);
    }
  }
}

TEST_CASE("c10d codec: legacy clients are read as 1.x-2.0 until they send an op only 2.1 has", "[c10d]") {
  Request watch;
  watch.op = Op::watch_key;
  watch.keys = {"/k"};
  Request del;
  del.op = Op::delete_key;
  del.keys = {"/k"};
  Request mget;
  mget.op = Op::multi_get;
  mget.keys = {"/k"};
  SECTION("1.13's WATCH_KEY (7) and DELETE_KEY (8)") {
    Parser p;
    const auto got = parse_all(*encode_request(Layout::v1, watch) + *encode_request(Layout::v1, del), 1, p);
    REQUIRE(got.size() == 2);
    CHECK(got[0].op == Op::watch_key);
    CHECK(got[1].op == Op::delete_key);
    CHECK(p.layout() == Layout::v1);
  }
  SECTION("a 2.1 client's MULTI_GET (9) switches the connection: its 7 is then DELETE_KEY") {
    Parser p;
    const auto got = parse_all(*encode_request(Layout::v21, mget) + *encode_request(Layout::v21, del), 1, p);
    REQUIRE(got.size() == 2);
    CHECK(got[0].op == Op::multi_get);
    CHECK(got[1].op == Op::delete_key);
    CHECK(p.layout() == Layout::v21);
  }
  SECTION("configured for 2.1, a legacy connection reads 7 as DELETE_KEY from the start") {
    Parser p({}, Layout::v21);
    const auto got = parse_all(*encode_request(Layout::v21, del), 1, p);
    REQUIRE(got.size() == 1);
    CHECK(got[0].op == Op::delete_key);
  }
  SECTION("a 2.2+ connection never switches: 9 is APPEND") {
    Parser p;
    Request app;
    app.op = Op::append;
    app.keys = {"/k"};
    app.values = {"x"};
    const auto got = parse_all(kValidate + *encode_request(Layout::v22, app), 1, p);
    REQUIRE(got.size() == 2);
    CHECK(got[1].op == Op::append);
  }
}

TEST_CASE("c10d codec: a relay's requests carry tags", "[c10d]") {
  Request r;
  r.op = Op::get;
  r.tag = 77;
  r.keys = {"/uid"};
  Request w;
  w.op = Op::watch_key;
  w.tag = 78;
  w.keys = {"/k"};
  const std::string stream = bytes({0xDD}) + std::string("DDPR", 4) + encode_tagged(r) + encode_tagged(w);
  Parser p;
  const auto got = parse_all(stream, 1, p);
  CHECK(p.relay());
  REQUIRE(got.size() == 2);
  CHECK(got[0].tag == 77);
  CHECK(got[0].op == Op::get);
  CHECK(got[0].keys == std::vector<std::string>{"/uid"});
  CHECK(got[1].tag == 78);
  CHECK(got[1].op == Op::watch_key);
  // A tagged answer: tag, length, then the answer itself.
  std::string out;
  const auto at = begin_tagged(out, 9);
  put_i64(out, -1);
  end_tagged(out, at);
  CHECK(out == bytes({9, 0, 0, 0, 8, 0, 0, 0}) + le64(static_cast<std::uint64_t>(-1)));
}

TEST_CASE("c10d codec: garbage and absurd lengths are refused before anything is buffered", "[c10d]") {
  SECTION("an unknown opcode") {
    Parser p;
    std::string_view in = "\x7f";
    CHECK(protocol_error([&] { p.next(in); }));
  }
  SECTION("HTTP is refused at its first byte") {
    Parser p;
    std::string_view in = "GET / HTTP/1.1\r\n\r\n";
    CHECK(protocol_error([&] { p.next(in); }));
  }
  SECTION("a 2^62-byte key length") {
    Parser p;
    const std::string s = kValidate + bytes({1}) + le64(std::uint64_t{1} << 62);
    std::string_view in(s);
    CHECK(protocol_error([&] {
      while (p.next(in)) {
      }
    }));
  }
  SECTION("a value over max_value, a list over max_keys, a request over max_request") {
    Limits l;
    l.max_key = 8;
    l.max_value = 16;
    l.max_keys = 2;
    l.max_request = 20;
    const std::string value = kValidate + bytes({1}) + le64(1) + "k" + le64(17);
    const std::string list = kValidate + bytes({5}) + le64(3);
    const std::string key = kValidate + bytes({3}) + le64(9);
    const std::string total =
        kValidate + bytes({2}) + le64(4) + "/key" + le64(16) + std::string(16, 'x') + le64(1);
    for (const auto& s : {value, list, key, total}) {
      Parser p(l);
      std::string_view in(s);
      CHECK(protocol_error([&] {
        while (p.next(in)) {
        }
      }));
    }
  }
  SECTION("the limits torch's libuv server accepts are accepted") {
    Parser p;
    Request r;
    r.op = Op::set;
    r.keys = {std::string(8 * 1024, 'k')};
    r.values = {std::string(8 * 1024 * 1024, 'v')};
    Request m;
    m.op = Op::multi_get;
    m.keys.assign(128 * 1024, "/k");
    const auto got =
        parse_all(kValidate + *encode_request(Layout::v22, r) + *encode_request(Layout::v22, m), 1 << 20, p);
    REQUIRE(got.size() == 3);
    CHECK(got[1].values[0].size() == 8 * 1024 * 1024);
    CHECK(got[2].keys.size() == 128 * 1024);
  }
}

TEST_CASE("c10d codec: a partial value waits for its whole length and is examined once", "[c10d]") {
  Parser p;
  const std::string s = kValidate + bytes({1}) + le64(2) + "/k" + le64(1000) + std::string(1000, 'z');
  std::string_view in(s.data(), 5 + 1 + 8 + 2 + 8 + 10);
  REQUIRE(p.next(in).has_value());  // VALIDATE
  CHECK_FALSE(p.next(in).has_value());
  // The key is taken; the value is not, and the parser says how much it needs.
  CHECK(in.size() == 8 + 10);
  CHECK(p.needed() == 8 + 1000);
  std::string_view rest(s.data() + s.size() - 1000 - 8, 1000 + 8);
  const auto q = p.next(rest);
  REQUIRE(q.has_value());
  CHECK(q->values[0] == std::string(1000, 'z'));
}
