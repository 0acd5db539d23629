#pragma once
// The store's wire protocol as pure functions on byte strings (see docs/protocol.md).
// Every message is a frame: a 4-byte big-endian payload length, then the payload. The first frame
// on a connection is the client's Hello (magic, version, run id); anything else is dropped.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::store::proto {

inline constexpr std::uint32_t kMagic = 0x44524456;  // "DRDV"
inline constexpr std::uint16_t kVersion = 2;         // 2: hello carries an auth credential
inline constexpr std::size_t kHeaderSize = 4;
inline constexpr std::size_t kMaxHelloSize = 4096;   // cap on the first frame, before we trust the peer
inline constexpr std::size_t kMaxCredential = 2048;  // a MUNGE credential for a 256-byte run id fits

struct Limits {
  std::size_t max_key = 4096;
  std::size_t max_value = 32u << 20;              // 32 MiB: a published plan for a very big job fits
  std::size_t max_message = (64u << 20) + 65536;  // compare_set carries two values
  std::size_t max_keys_per_request = 4096;        // check / wait / wait_any lists
  std::size_t max_id = 256;                       // run id and label
};

enum class Op : std::uint8_t {
  set = 2,
  get = 3,
  add = 4,
  compare_set = 5,
  check = 6,
  del = 7,
  num_keys = 8,
  wait = 9,
  wait_any = 10,
  ping = 11,
  // One connection per agent (docs/protocol.md): a heartbeat is allowed even while a blocking
  // request is pending and is answered out of band (Status::pong); watch sets the connection's
  // label and liveness promise and subscribes it to keys, whose writes are pushed (Status::event).
  heartbeat = 12,
  watch = 13,
};
const char* to_string(Op op);

// event and pong are out-of-band frames: they may arrive between any two in-order answers.
enum class Status : std::uint8_t { ok = 0, timeout = 1, not_found = 2, error = 3, event = 4, pong = 5 };
inline bool out_of_band(Status s) {
  return s == Status::event || s == Status::pong;
}

struct Hello {
  std::uint32_t magic = kMagic;
  std::uint16_t version = kVersion;
  std::uint32_t liveness_ms = 0;  // >0: the server drops us if no request arrives for this long
  std::string run_id;
  std::string label;       // names the connection in the server's "lost peer" reports (e.g. "agent/0/3")
  std::uint8_t auth = 0;   // auth::Mode: 0 none, 1 munge, 2 token
  std::string credential;  // see rendezvous/auth.hpp
};

struct Request {
  Op op = Op::ping;
  std::string key;
  std::string value;              // set: value; compare_set: expected
  std::string value2;             // compare_set: desired
  std::int64_t number = 0;        // add: delta; watch: liveness in ms (0 = none); heartbeat: 1 = pong wanted
  std::uint64_t timeout_ms = 0;   // get / wait / wait_any
  std::vector<std::string> keys;  // check / wait / wait_any; watch: the subscribed keys (may be empty)
};

// The number of a refused hello's answer when the store serves another run (its run id differs): the
// client may look for its own store elsewhere (a fallback port), where any other refusal is final.
inline constexpr std::int64_t kRefusedOtherRun = 1;

struct Response {
  Status status = Status::ok;
  std::int64_t number = 0;  // add: new value; check/del: 0/1; num_keys; wait_any, event: index
  std::string value;        // get / compare_set / event value, or the error message
};

// Encoders return whole frames (header included).
std::string encode_hello(const Hello& h);
std::string encode_request(const Request& r);
std::string encode_response(const Response& r);
// The one pong frame every heartbeat gets (encoded once).
const std::string& pong_frame();

// Decoders take one payload (header stripped) and throw store::Error(Kind::protocol) on anything
// malformed: truncation, trailing bytes, unknown op, a field over the limits.
Hello decode_hello(std::string_view payload, const Limits& limits = {});
Request decode_request(std::string_view payload, const Limits& limits = {});
Response decode_response(std::string_view payload, const Limits& limits = {});

// Incremental frame splitter with a hard cap: feed bytes as they arrive, take whole payloads out.
// A length prefix of 0 or above the cap throws as soon as its 4 bytes are in, before any payload
// is buffered, so an absurd prefix costs nothing.
class FrameParser {
 public:
  explicit FrameParser(std::size_t max_payload) : max_(max_payload) {}
  void set_max(std::size_t max_payload) { max_ = max_payload; }
  void feed(std::string_view bytes);
  std::optional<std::string> next();
  std::size_t buffered() const { return buf_.size() - pos_; }

 private:
  std::size_t max_;
  std::string buf_;
  std::size_t pos_ = 0;
};

}  // namespace ddprun::store::proto
