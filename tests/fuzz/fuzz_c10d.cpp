// libFuzzer target for the workers' store codec (store/c10d_codec.hpp): the input is the byte
// stream of one connection, as torch's clients (or anyone reaching MASTER_PORT) send it. It goes
// through the parser with the default limits and with tiny ones (so every cap is reached by short
// inputs), once with each legacy layout setting. Checked:
//   - nothing crashes or reads out of bounds (sanitizers); the only exception is store::Error of
//     kind protocol with a one-line message;
//   - no key, value, list or request is larger than its cap, and the parser never holds more than
//     max_request bytes of a request under way;
//   - fed in chunks whose sizes come from a hash of the input, the requests, the layout and the
//     error are the same as when fed at once;
//   - every request re-encodes, in the layout it was read in, to bytes that parse back to an
//     equal request.
// Any violation calls abort(). Seeds: tests/fuzz/corpus/c10d/.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "store/c10d_codec.hpp"
#include "store/error.hpp"

#define FUZZ_REQUIRE(cond)                                                       \
  do {                                                                           \
    if (!(cond)) {                                                               \
      std::fprintf(stderr, "fuzz_c10d.cpp:%d: violated: %s\n", __LINE__, #cond); \
      std::abort();                                                              \
    }                                                                            \
  } while (false)

namespace store = ddprun::store;
namespace c10d = ddprun::store::c10d;

namespace {

c10d::Limits tiny_limits() {
  c10d::Limits l;
  l.max_key = 8;
  l.max_value = 32;
  l.max_keys = 3;
  l.max_request = 48;
  return l;
}

bool same(const c10d::Request& a, const c10d::Request& b) {
  return a.op == b.op && a.tag == b.tag && a.u32 == b.u32 && a.number == b.number && a.keys == b.keys &&
         a.values == b.values;
}

struct Outcome {
  std::vector<c10d::Request> requests;
  std::vector<c10d::Layout> layouts;  // the layout each request was read in
  bool relay = false;
  std::string error;
};

class Chunker {
 public:
  explicit Chunker(std::string_view data) {
    for (const char c : data) state_ = (state_ ^ static_cast<std::uint8_t>(c)) * 0x100000001b3ULL;
    if (state_ == 0) state_ = 1;
  }
  std::size_t next(std::size_t remaining) {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    const std::size_t cap = (state_ & 0x300) == 0 ? 4096 : 9;
    const std::size_t n = 1 + static_cast<std::size_t>(state_ % cap);
    return n < remaining ? n : remaining;
  }

 private:
  std::uint64_t state_ = 0xcbf29ce484222325ULL;
};

void check_caps(const c10d::Request& q, const c10d::Limits& l) {
  FUZZ_REQUIRE(q.keys.size() <= l.max_keys || q.keys.size() == 1);
  std::size_t total = 0;
  for (const auto& k : q.keys) {
    FUZZ_REQUIRE(k.size() <= l.max_key);
    total += k.size();
  }
  for (const auto& v : q.values) {
    FUZZ_REQUIRE(v.size() <= l.max_value);
    total += v.size();
  }
  FUZZ_REQUIRE(total <= l.max_request);
}

// Feeds the stream the way a connection buffers it: the parser takes whole fields from the front,
// the rest waits for more bytes.
Outcome run(std::string_view data, const c10d::Limits& l, c10d::Layout legacy, bool chunked) {
  Outcome out;
  c10d::Parser p(l, legacy);
  Chunker chunker(data);
  std::string held;
  std::size_t pos = 0;
  try {
    while (pos < data.size()) {
      const std::size_t n = chunked ? chunker.next(data.size() - pos) : data.size() - pos;
      held.append(data.substr(pos, n));
      pos += n;
      std::string_view in(held);
      while (in.size() >= p.needed()) {
        auto q = p.next(in);
        FUZZ_REQUIRE(p.held() <= l.max_request);
        if (!q) break;
        check_caps(*q, l);
        // A 2.1-only opcode may have switched the connection: record the layout it was read in.
        out.layouts.push_back(p.layout());
        out.requests.push_back(std::move(*q));
      }
      held.erase(0, held.size() - in.size());
      // A partial field is all the caller ever holds: at most a length and its bytes.
      FUZZ_REQUIRE(held.size() <= 8 + (l.max_value > l.max_key ? l.max_value : l.max_key) + 8);
    }
  } catch (const store::Error& e) {
    FUZZ_REQUIRE(e.kind() == store::Error::Kind::protocol);
    const std::string_view what = e.what();
    FUZZ_REQUIRE(!what.empty() && what.find('\n') == std::string_view::npos);
    out.error = e.what();
  }
  out.relay = p.relay();
  return out;
}

void round_trip(const Outcome& o, const c10d::Limits& l) {
  for (std::size_t i = 0; i < o.requests.size(); ++i) {
    const c10d::Request& q = o.requests[i];
    std::string bytes;
    c10d::Layout layout = o.layouts[i];
    if (o.relay) {
      bytes = std::string(1, static_cast<char>(c10d::kRelayByte)) + std::string("DDPR", 4) +
              c10d::encode_tagged(q);
    } else {
      const auto e = c10d::encode_request(layout, q);
      FUZZ_REQUIRE(e.has_value());
      bytes = *e;
      // A lone 2.2+ request needs the opening VALIDATE in front, unless it is one.
      if (layout == c10d::Layout::v22 && q.op != c10d::Op::validate) {
        c10d::Request v;
        v.op = c10d::Op::validate;
        v.u32 = c10d::kValidateMagic;
        bytes = *c10d::encode_request(c10d::Layout::v22, v) + bytes;
      }
      if (layout == c10d::Layout::v22 && q.op == c10d::Op::validate && q.u32 != c10d::kValidateMagic)
        continue;
    }
    c10d::Parser p(l, layout == c10d::Layout::v21 ? c10d::Layout::v21 : c10d::Layout::v1);
    std::string_view in(bytes);
    std::vector<c10d::Request> back;
    while (auto r = p.next(in)) back.push_back(std::move(*r));
    FUZZ_REQUIRE(in.empty());
    FUZZ_REQUIRE(!back.empty());
    FUZZ_REQUIRE(same(back.back(), q));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  for (const c10d::Limits& l : {c10d::Limits{}, tiny_limits()}) {
    for (const c10d::Layout legacy : {c10d::Layout::v1, c10d::Layout::v21}) {
      const Outcome whole = run(input, l, legacy, false);
      const Outcome chunked = run(input, l, legacy, true);
      FUZZ_REQUIRE(whole.error == chunked.error);
      FUZZ_REQUIRE(whole.requests.size() == chunked.requests.size());
      for (std::size_t i = 0; i < whole.requests.size(); ++i) {
        FUZZ_REQUIRE(same(whole.requests[i], chunked.requests[i]));
        FUZZ_REQUIRE(whole.layouts[i] == chunked.layouts[i]);
      }
      round_trip(whole, l);
    }
  }
  return 0;
}
