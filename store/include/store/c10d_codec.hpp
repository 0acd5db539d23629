#pragma once
// PyTorch's TCPStore wire protocol, as pure functions (docs/protocol.md, "The workers' store").
// ddprun's agent serves it to the workers (TORCHELASTIC_USE_AGENT_STORE=True), so every torch
// client from 1.x on talks to it as to torch's own server. Three opcode layouts exist; one port
// serves all of them: a 2.2+ client opens with VALIDATE (00 CE F7 85 3C), an older one with its
// first request, and between the two older layouts the rule of `Parser` decides.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::store::c10d {

// The opcode layouts: torch 1.x to 2.0 (WATCH_KEY = 7, DELETE_KEY = 8), 2.1 (DELETE_KEY = 7,
// APPEND .. CANCEL_WAIT = 8 .. 11), 2.2 and later (VALIDATE = 0, every other op one higher, then
// PING, QUEUE_*, LIST; append-only since).
enum class Layout : std::uint8_t { v1, v21, v22 };
const char* to_string(Layout l);

enum class Op : std::uint8_t {
  validate,
  set,
  compare_set,
  get,
  add,
  check,
  wait,
  num_keys,
  watch_key,  // 1.x-2.0 only
  delete_key,
  append,
  multi_get,
  multi_set,
  cancel_wait,
  ping,
  queue_push,
  queue_pop,
  queue_len,
  list,
};
inline constexpr std::size_t kOpCount = 19;
const char* to_string(Op op);

// The op a byte means in a layout, and back; nullopt where the layout has no such op.
std::optional<Op> decode_op(Layout l, std::uint8_t byte);
std::optional<std::uint8_t> encode_op(Layout l, Op op);

inline constexpr std::uint32_t kValidateMagic = 0x3C85F7CE;  // on the wire: CE F7 85 3C
// ddprun's relays (--worker-store relay) open with DD and this magic, then send tagged requests.
inline constexpr std::uint8_t kRelayByte = 0xDD;
inline constexpr std::uint32_t kRelayMagic = 0x52504444;  // "DDPR" on the wire
// A relay forwards a 1.x-2.0 worker's WATCH_KEY under this opcode (2.2+ has no WATCH_KEY).
inline constexpr std::uint8_t kRelayWatchKey = 0xF7;

// Replies. CHECK: READY 0 / NOT_READY 1. WAIT: STOP_WAITING 0; CANCEL_WAIT: WAIT_CANCELED 1.
// WATCH_KEY: KEY_CALLBACK_REGISTERED 3, then events (type, key, old value, new value).
inline constexpr std::uint8_t kReady = 0;
inline constexpr std::uint8_t kNotReady = 1;
inline constexpr std::uint8_t kStopWaiting = 0;
inline constexpr std::uint8_t kWaitCanceled = 1;
enum class WatchEvent : std::uint8_t { updated = 0, created = 1, deleted = 2, registered = 3 };

// Every bound the parser enforces. Each is at least what torch's libuv server (the default since
// 2.4) accepts: keys 8 KiB, values 8 MiB, 128 Ki keys a list. max_request bounds one request's
// keys and values together, so no single request can make the server hold more.
struct Limits {
  std::size_t max_key = 64u << 10;
  std::size_t max_value = 64u << 20;
  std::size_t max_keys = 128u << 10;
  std::size_t max_request = 256u << 20;
};

struct Request {
  Op op = Op::ping;
  std::uint32_t tag = 0;            // relay connections only: which worker request this is
  std::uint32_t u32 = 0;            // validate: magic; ping: nonce
  std::int64_t number = 0;          // add: delta
  std::vector<std::string> keys;    // the key, or the key list (check, wait, multi_get, multi_set)
  std::vector<std::string> values;  // set/append/queue_push: 1; compare_set: expected, desired;
                                    // multi_set: one per key
};

// The wire form of a request in a layout; nullopt when the layout has no such op. A relay
// request (tagged) is the tag, then the 2.2+ form.
std::optional<std::string> encode_request(Layout l, const Request& r);
std::string encode_tagged(const Request& r);

// Replies, appended to `out`: numbers little-endian as torch writes them (a raw x86/ARM copy),
// bytes as a u64 length and the bytes.
void put_u8(std::string& out, std::uint8_t v);
void put_u32(std::string& out, std::uint32_t v);
void put_i64(std::string& out, std::int64_t v);
void put_bytes(std::string& out, std::string_view bytes);
// A reply on a relay connection: u32 tag, u32 length, then the reply as a direct client gets it.
std::size_t begin_tagged(std::string& out, std::uint32_t tag);
void end_tagged(std::string& out, std::size_t start);
inline constexpr std::size_t kTaggedHeader = 8;
// A WATCH_KEY event (1.x-2.0).
void put_watch_event(std::string& out, WatchEvent type, std::string_view key, std::string_view old_value,
                     std::string_view new_value);

// Little-endian reads for clients (tests, the bench, the relay); `at` must leave room.
std::uint32_t get_u32(std::string_view bytes, std::size_t at);
std::int64_t get_i64(std::string_view bytes, std::size_t at);

// How a connection's first bytes identify its client. nullopt: too few bytes yet.
enum class Opening { v22, relay, legacy };
std::optional<Opening> sniff(std::string_view first_bytes);

namespace detail {
enum class Field : std::uint8_t { u32, i64, key, value, key_list, pair_list };
}

// Incremental, resumable request parser for one connection. Feed it the bytes buffered so far:
// it consumes whole fields only (the rest stays with the caller until more arrive), so any
// segmentation gives the same requests, and each byte is examined once. Every length and count
// is checked against Limits as soon as its 8 bytes are in, before anything is buffered for it.
// Violations throw store::Error(protocol) with a one-line reason; the server then closes the
// connection (the protocol has no error reply).
//
// The layout: a 2.2+ opening gives v22, a relay opening tagged v22, anything else `legacy`
// (v1 by default). The documented rule between the two older layouts: a legacy connection reads
// opcodes 7 and 8 as 1.x-2.0 does (WATCH_KEY, DELETE_KEY) until it sends 9, 10 or 11, which only
// torch 2.1 has; from then on it is read as 2.1. With legacy = v21 it is 2.1 from the start.
class Parser {
 public:
  explicit Parser(const Limits& limits = {}, Layout legacy = Layout::v1);

  // Consumes from the front of `in` what it can; returns a whole request, or nullopt when `in`
  // holds too little (needed() then says how many bytes `in` must hold before calling again).
  std::optional<Request> next(std::string_view& in);
  std::size_t needed() const { return needed_; }
  bool sniffed() const { return sniffed_; }
  Layout layout() const { return layout_; }
  bool relay() const { return tagged_; }
  // Bytes of keys and values the request under way already holds.
  std::size_t held() const { return held_; }

 private:
  using Field = detail::Field;
  bool field(std::string_view& in, Field f);
  bool string_field(std::string_view& in, bool is_key, std::string& out);
  void start(Op op);

  Limits limits_;
  Layout layout_;
  bool legacy_fixed_;  // legacy = v21: no switching
  bool sniffed_ = false;
  bool tagged_ = false;
  bool have_tag_ = false;
  bool in_op_ = false;
  std::size_t needed_ = 1;
  std::size_t held_ = 0;
  // The request under way and where in its fields the parser is.
  Request req_;
  const Field* fields_ = nullptr;
  std::size_t nfields_ = 0;
  std::size_t field_ = 0;
  std::optional<std::uint64_t> count_;  // a list's element count, once read
  bool pair_value_ = false;             // multi_set: the key of the pair is in, its value next
};

}  // namespace ddprun::store::c10d
