// libFuzzer target for the store wire codec (rendezvous/codec.hpp). The input is a byte stream as
// it arrives on a socket. It goes through the server's path (hello under the 4 KiB first-frame cap,
// then requests under max_message) and the client's path (responses), each with the default
// limits and with tiny ones so the caps are reached by short inputs. Checked:
//   - nothing crashes or reads out of bounds (sanitizers), and the only exception is
//     store::Error of kind protocol with a one-line message;
//   - no payload or decoded field is larger than its cap;
//   - the bytes are fed in chunks whose sizes come from a hash of the input, and the result is the
//     same as feeding them all at once;
//   - every decoded message re-encodes to the same bytes (the hello up to its reserved flags) and
//     decodes back to an equal message.
// Any violation calls abort(). Seeds: tests/fuzz/corpus/codec/.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/codec.hpp"
#include "store/error.hpp"

// abort() is what libFuzzer and the replay report as a failure; say which property broke first.
#define FUZZ_REQUIRE(cond)                                                        \
  do {                                                                            \
    if (!(cond)) {                                                                \
      std::fprintf(stderr, "fuzz_codec.cpp:%d: violated: %s\n", __LINE__, #cond); \
      std::abort();                                                               \
    }                                                                             \
  } while (false)

namespace store = ddprun::store;
namespace proto = ddprun::store::proto;

namespace {

proto::Limits tiny_limits() {
  proto::Limits l;
  l.max_key = 16;
  l.max_value = 64;
  l.max_message = 256;
  l.max_keys_per_request = 4;
  l.max_id = 8;
  return l;
}

bool same(const proto::Hello& a, const proto::Hello& b) {
  return a.magic == b.magic && a.version == b.version && a.liveness_ms == b.liveness_ms &&
         a.run_id == b.run_id && a.label == b.label && a.auth == b.auth && a.credential == b.credential;
}
bool same(const proto::Request& a, const proto::Request& b) {
  return a.op == b.op && a.key == b.key && a.value == b.value && a.value2 == b.value2 &&
         a.number == b.number && a.timeout_ms == b.timeout_ms && a.keys == b.keys;
}
bool same(const proto::Response& a, const proto::Response& b) {
  return a.status == b.status && a.number == b.number && a.value == b.value;
}

// The payload of one whole frame, through a fresh parser: exactly one frame, nothing left over.
std::string unframe(const std::string& frame, std::size_t cap) {
  proto::FrameParser p(cap);
  p.feed(frame);
  std::optional<std::string> payload = p.next();
  FUZZ_REQUIRE(payload.has_value());
  FUZZ_REQUIRE(p.buffered() == 0);
  return *payload;
}

std::string frame_of(std::string_view payload) {
  std::string f(proto::kHeaderSize, '\0');
  const auto n = static_cast<std::uint32_t>(payload.size());
  for (std::size_t i = 0; i < proto::kHeaderSize; ++i) {
    f[i] = static_cast<char>(static_cast<std::uint8_t>(n >> (24 - 8 * i)));
  }
  f.append(payload);
  return f;
}

void check_hello(const std::string& payload, const proto::Hello& h, const proto::Limits& l) {
  FUZZ_REQUIRE(h.magic == proto::kMagic);
  FUZZ_REQUIRE(h.run_id.size() <= l.max_id && h.label.size() <= l.max_id);
  const std::string again = proto::encode_hello(h);
  // Bytes 10-11 of the payload are the reserved flags, which the decoder ignores.
  std::string expected = frame_of(payload);
  expected[proto::kHeaderSize + 6] = '\0';
  expected[proto::kHeaderSize + 7] = '\0';
  FUZZ_REQUIRE(again == expected);
  FUZZ_REQUIRE(same(proto::decode_hello(unframe(again, proto::kMaxHelloSize), l), h));
}

void check_request(const std::string& payload, const proto::Request& q, const proto::Limits& l) {
  FUZZ_REQUIRE(q.key.size() <= l.max_key);
  FUZZ_REQUIRE(q.value.size() <= l.max_value && q.value2.size() <= l.max_value);
  FUZZ_REQUIRE(q.keys.size() <= l.max_keys_per_request);
  for (const auto& k : q.keys) FUZZ_REQUIRE(k.size() <= l.max_key);
  const std::string again = proto::encode_request(q);
  FUZZ_REQUIRE(again == frame_of(payload));
  FUZZ_REQUIRE(same(proto::decode_request(unframe(again, l.max_message), l), q));
}

void check_response(const std::string& payload, const proto::Response& s, const proto::Limits& l) {
  FUZZ_REQUIRE(s.value.size() <= 2 * l.max_value);
  const std::string again = proto::encode_response(s);
  FUZZ_REQUIRE(again == frame_of(payload));
  FUZZ_REQUIRE(same(proto::decode_response(unframe(again, l.max_message), l), s));
}

// What one connection made of the stream: how many messages it decoded, how many bytes were left
// buffered, and the protocol error that ended it, if any.
struct Outcome {
  std::size_t messages = 0;
  std::size_t left = 0;
  std::string error;
  bool operator==(const Outcome&) const = default;
};

// Deterministic chunk sizes from the input itself (FNV-1a seed, xorshift), so libFuzzer explores
// chunkings as it mutates bytes and every crash reproduces from the file alone.
class Chunker {
 public:
  explicit Chunker(std::string_view data) {
    for (const char c : data) {
      state_ = (state_ ^ static_cast<std::uint8_t>(c)) * 0x100000001b3ULL;
    }
    if (state_ == 0) state_ = 1;
  }
  std::size_t next(std::size_t remaining) {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    // Mostly short chunks (header splits), sometimes long ones.
    const std::size_t cap = (state_ & 0x300) == 0 ? 4096 : 9;
    const std::size_t n = 1 + static_cast<std::size_t>(state_ % cap);
    return n < remaining ? n : remaining;
  }

 private:
  std::uint64_t state_ = 0xcbf29ce484222325ULL;
};

enum class Side { server, client };

// Feeds `data` to a parser in chunks (or whole when `chunked` is false) and decodes every payload
// the way the server (hello first, then requests) or the client (responses) does.
Outcome run(std::string_view data, Side side, const proto::Limits& l, bool chunked) {
  Outcome out;
  bool hello_done = false;
  proto::FrameParser parser(side == Side::server ? proto::kMaxHelloSize : l.max_message);
  Chunker chunker(data);
  std::size_t pos = 0;
  try {
    while (pos < data.size()) {
      const std::size_t n = chunked ? chunker.next(data.size() - pos) : data.size() - pos;
      parser.feed(data.substr(pos, n));
      pos += n;
      while (auto payload = parser.next()) {
        FUZZ_REQUIRE(!payload->empty());
        if (side == Side::client) {
          FUZZ_REQUIRE(payload->size() <= l.max_message);
          check_response(*payload, proto::decode_response(*payload, l), l);
        } else if (!hello_done) {
          FUZZ_REQUIRE(payload->size() <= proto::kMaxHelloSize);
          check_hello(*payload, proto::decode_hello(*payload, l), l);
          hello_done = true;
          parser.set_max(l.max_message);
        } else {
          FUZZ_REQUIRE(payload->size() <= l.max_message);
          check_request(*payload, proto::decode_request(*payload, l), l);
        }
        ++out.messages;
      }
    }
  } catch (const store::Error& e) {
    FUZZ_REQUIRE(e.kind() == store::Error::Kind::protocol);
    const std::string_view what = e.what();
    FUZZ_REQUIRE(!what.empty() && what.find('\n') == std::string_view::npos);
    out.error = e.what();
  }
  // Without an error the parser holds at most the one incomplete frame it waits for, whose length
  // it has already checked against the cap. (After an error the chunked run stops feeding early.)
  if (out.error.empty()) {
    out.left = parser.buffered();
    const std::size_t cap = side == Side::server && !hello_done ? proto::kMaxHelloSize : l.max_message;
    FUZZ_REQUIRE(out.left < proto::kHeaderSize + cap);
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  for (const proto::Limits& l : {proto::Limits{}, tiny_limits()}) {
    for (const Side side : {Side::server, Side::client}) {
      FUZZ_REQUIRE(run(input, side, l, true) == run(input, side, l, false));
    }
  }
  return 0;
}
