#include "store/codec.hpp"

#include <fmt/core.h>

#include "store/error.hpp"

namespace ddprun::store::proto {
namespace {

[[noreturn]] void bad(const std::string& what) {
  throw Error(Error::Kind::protocol, "protocol error: " + what, "decode");
}

void put_u8(std::string& out, std::uint8_t v) {
  out.push_back(static_cast<char>(v));
}

template <typename U>
void put_be(std::string& out, U v) {
  for (int shift = static_cast<int>(sizeof(U) * 8) - 8; shift >= 0; shift -= 8) {
    out.push_back(static_cast<char>(static_cast<std::uint8_t>(v >> shift)));
  }
}

void put_str(std::string& out, std::string_view s) {
  put_be<std::uint32_t>(out, static_cast<std::uint32_t>(s.size()));
  out.append(s);
}

// Builds a frame in place: reserve the header, append the payload, then patch the length.
std::string begin_frame() {
  return std::string(kHeaderSize, '\0');
}
std::string end_frame(std::string f) {
  const auto len = static_cast<std::uint32_t>(f.size() - kHeaderSize);
  for (std::size_t i = 0; i < kHeaderSize; ++i) {
    f[i] = static_cast<char>(static_cast<std::uint8_t>(len >> (24 - 8 * i)));
  }
  return f;
}

class Reader {
 public:
  explicit Reader(std::string_view p) : p_(p) {}
  std::uint8_t u8() {
    need(1, "a 1-byte field");
    return static_cast<std::uint8_t>(p_[pos_++]);
  }
  template <typename U>
  U be(const char* what) {
    need(sizeof(U), what);
    U v = 0;
    for (std::size_t i = 0; i < sizeof(U); ++i) {
      v = static_cast<U>((v << 8) | static_cast<U>(static_cast<std::uint8_t>(p_[pos_ + i])));
    }
    pos_ += sizeof(U);
    return v;
  }
  std::string str(std::size_t cap, const char* what) {
    const std::uint32_t n = be<std::uint32_t>(what);
    if (n > cap) bad(fmt::format("{} of {} bytes exceeds the limit of {}", what, n, cap));
    need(n, what);
    std::string s(p_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  void finish() const {
    if (pos_ != p_.size()) bad(fmt::format("{} unexpected trailing bytes", p_.size() - pos_));
  }

 private:
  void need(std::size_t n, const char* what) const {
    if (p_.size() - pos_ < n) bad(fmt::format("message truncated while reading {}", what));
  }
  std::string_view p_;
  std::size_t pos_ = 0;
};

std::vector<std::string> read_keys(Reader& r, const Limits& l, bool may_be_empty = false) {
  const std::uint32_t n = r.be<std::uint32_t>("key count");
  if (n == 0 && !may_be_empty) bad("empty key list");
  if (n > l.max_keys_per_request) {
    bad(fmt::format("{} keys in one request exceed the limit of {}", n, l.max_keys_per_request));
  }
  std::vector<std::string> keys;
  keys.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) keys.push_back(r.str(l.max_key, "key"));
  return keys;
}

// The operation a request's first byte names; any other code is a protocol error.
Op op_of(std::uint8_t code) {
  switch (static_cast<Op>(code)) {
    case Op::set:
    case Op::get:
    case Op::add:
    case Op::compare_set:
    case Op::check:
    case Op::del:
    case Op::num_keys:
    case Op::wait:
    case Op::wait_any:
    case Op::ping:
    case Op::heartbeat:
    case Op::watch:
      return static_cast<Op>(code);
  }
  bad(fmt::format("unknown operation code {}", code));
}

// The fields after the operation code, as q.op has them.
void read_operands(Reader& r, Request& q, const Limits& l) {
  switch (q.op) {
    case Op::set:
      q.key = r.str(l.max_key, "key");
      q.value = r.str(l.max_value, "value");
      break;
    case Op::get:
      q.key = r.str(l.max_key, "key");
      q.timeout_ms = r.be<std::uint64_t>("timeout");
      break;
    case Op::add:
      q.key = r.str(l.max_key, "key");
      q.number = static_cast<std::int64_t>(r.be<std::uint64_t>("delta"));
      break;
    case Op::compare_set:
      q.key = r.str(l.max_key, "key");
      q.value = r.str(l.max_value, "expected value");
      q.value2 = r.str(l.max_value, "desired value");
      break;
    case Op::check:
      q.keys = read_keys(r, l);
      break;
    case Op::wait:
    case Op::wait_any:
      q.keys = read_keys(r, l);
      q.timeout_ms = r.be<std::uint64_t>("timeout");
      break;
    case Op::del:
      q.key = r.str(l.max_key, "key");
      break;
    case Op::num_keys:
    case Op::ping:
      break;
    case Op::heartbeat:
      q.number = r.u8();  // the flags as sent; the server reads bit 0 and ignores the reserved ones
      break;
    case Op::watch:
      q.key = r.str(l.max_id, "label");
      q.number = static_cast<std::int64_t>(r.be<std::uint64_t>("liveness"));  // the server bounds it
      q.keys = read_keys(r, l, /*may_be_empty=*/true);
      break;
  }
}

}  // namespace

const char* to_string(Op op) {
  switch (op) {
    case Op::set:
      return "set";
    case Op::get:
      return "get";
    case Op::add:
      return "add";
    case Op::compare_set:
      return "compare_set";
    case Op::check:
      return "check";
    case Op::del:
      return "del";
    case Op::num_keys:
      return "num_keys";
    case Op::wait:
      return "wait";
    case Op::wait_any:
      return "wait_any";
    case Op::ping:
      return "ping";
    case Op::heartbeat:
      return "heartbeat";
    case Op::watch:
      return "watch";
  }
  return "unknown";
}

std::string encode_hello(const Hello& h) {
  std::string f = begin_frame();
  put_be<std::uint32_t>(f, h.magic);
  put_be<std::uint16_t>(f, h.version);
  put_be<std::uint16_t>(f, 0);  // flags, reserved
  put_be<std::uint32_t>(f, h.liveness_ms);
  put_str(f, h.run_id);
  put_str(f, h.label);
  if (h.version >= 2) {  // encode what decode_hello reads, whatever the version
    put_u8(f, h.auth);
    put_str(f, h.credential);
  }
  return end_frame(std::move(f));
}

Hello decode_hello(std::string_view payload, const Limits& limits) {
  Reader r(payload);
  Hello h;
  h.magic = r.be<std::uint32_t>("magic");
  if (h.magic != kMagic) {
    bad(fmt::format("bad magic 0x{:08x} (expected 0x{:08x}): not a ddprun store client", h.magic, kMagic));
  }
  h.version = r.be<std::uint16_t>("version");
  (void)r.be<std::uint16_t>("flags");
  h.liveness_ms = r.be<std::uint32_t>("liveness");
  h.run_id = r.str(limits.max_id, "run id");
  h.label = r.str(limits.max_id, "label");
  // A version-1 hello ends here; the server then refuses its version with a clear answer.
  if (h.version >= 2) {
    h.auth = r.u8();
    h.credential = r.str(kMaxCredential, "credential");
  }
  r.finish();
  return h;
}

std::string encode_request(const Request& q) {
  std::string f = begin_frame();
  put_u8(f, static_cast<std::uint8_t>(q.op));
  switch (q.op) {
    case Op::set:
      put_str(f, q.key);
      put_str(f, q.value);
      break;
    case Op::get:
      put_str(f, q.key);
      put_be<std::uint64_t>(f, q.timeout_ms);
      break;
    case Op::add:
      put_str(f, q.key);
      put_be<std::uint64_t>(f, static_cast<std::uint64_t>(q.number));
      break;
    case Op::compare_set:
      put_str(f, q.key);
      put_str(f, q.value);
      put_str(f, q.value2);
      break;
    case Op::check:
    case Op::wait:
    case Op::wait_any:
      put_be<std::uint32_t>(f, static_cast<std::uint32_t>(q.keys.size()));
      for (const auto& k : q.keys) put_str(f, k);
      if (q.op != Op::check) put_be<std::uint64_t>(f, q.timeout_ms);
      break;
    case Op::del:
      put_str(f, q.key);
      break;
    case Op::watch:
      put_str(f, q.key);
      put_be<std::uint64_t>(f, static_cast<std::uint64_t>(q.number));
      put_be<std::uint32_t>(f, static_cast<std::uint32_t>(q.keys.size()));
      for (const auto& k : q.keys) put_str(f, k);
      break;
    case Op::heartbeat:
      put_u8(f, static_cast<std::uint8_t>(q.number));  // flags: bit 0 asks for a pong
      break;
    case Op::num_keys:
    case Op::ping:
      break;
  }
  return end_frame(std::move(f));
}

Request decode_request(std::string_view payload, const Limits& l) {
  Reader r(payload);
  Request q;
  q.op = op_of(r.u8());
  read_operands(r, q, l);
  r.finish();
  return q;
}

std::string encode_response(const Response& s) {
  std::string f = begin_frame();
  put_u8(f, static_cast<std::uint8_t>(s.status));
  put_be<std::uint64_t>(f, static_cast<std::uint64_t>(s.number));
  put_str(f, s.value);
  return end_frame(std::move(f));
}

const std::string& pong_frame() {
  static const std::string frame = encode_response({Status::pong, 0, {}});
  return frame;
}

Response decode_response(std::string_view payload, const Limits& l) {
  Reader r(payload);
  Response s;
  const std::uint8_t st = r.u8();
  if (st > static_cast<std::uint8_t>(Status::pong)) bad(fmt::format("unknown status {}", st));
  s.status = static_cast<Status>(st);
  s.number = static_cast<std::int64_t>(r.be<std::uint64_t>("number"));
  s.value = r.str(2 * l.max_value, "value");
  r.finish();
  return s;
}

void FrameParser::feed(std::string_view bytes) {
  // Drop consumed bytes before growing, so a long-lived connection does not accumulate.
  if (pos_ > 0 && pos_ >= buf_.size() / 2) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  buf_.append(bytes);
}

std::optional<std::string> FrameParser::next() {
  const std::size_t avail = buf_.size() - pos_;
  if (avail < kHeaderSize) return std::nullopt;
  std::uint32_t len = 0;
  for (std::size_t i = 0; i < kHeaderSize; ++i) {
    len = (len << 8) | static_cast<std::uint8_t>(buf_[pos_ + i]);
  }
  if (len == 0) bad("empty frame");
  if (len > max_) bad(fmt::format("frame of {} bytes exceeds the limit of {}", len, max_));
  if (avail - kHeaderSize < len) return std::nullopt;
  std::string payload = buf_.substr(pos_ + kHeaderSize, len);
  pos_ += kHeaderSize + len;
  return payload;
}

}  // namespace ddprun::store::proto
