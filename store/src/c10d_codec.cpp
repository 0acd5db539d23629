#include "store/c10d_codec.hpp"

#include <algorithm>
#include <array>

#include <fmt/core.h>

#include "store/error.hpp"

namespace ddprun::store::c10d {
namespace {

[[noreturn]] void bad(const std::string& what) {
  throw Error(Error::Kind::protocol, "worker store: " + what, "c10d");
}

// Each layout's opcodes in wire order: the byte is the index.
constexpr std::array kV1{Op::set,  Op::compare_set, Op::get,       Op::add,       Op::check,
                         Op::wait, Op::num_keys,    Op::watch_key, Op::delete_key};
constexpr std::array kV21{Op::set,    Op::compare_set, Op::get,       Op::add,
                          Op::check,  Op::wait,        Op::num_keys,  Op::delete_key,
                          Op::append, Op::multi_get,   Op::multi_set, Op::cancel_wait};
constexpr std::array kV22{Op::validate,  Op::set,       Op::compare_set, Op::get,        Op::add,
                          Op::check,     Op::wait,      Op::num_keys,    Op::delete_key, Op::append,
                          Op::multi_get, Op::multi_set, Op::cancel_wait, Op::ping,       Op::queue_push,
                          Op::queue_pop, Op::queue_len, Op::list};

template <std::size_t N>
std::optional<Op> in_table(const std::array<Op, N>& t, std::uint8_t byte) {
  if (byte >= N) return std::nullopt;
  return t[byte];
}
template <std::size_t N>
std::optional<std::uint8_t> index_of(const std::array<Op, N>& t, Op op) {
  for (std::size_t i = 0; i < N; ++i) {
    if (t[i] == op) return static_cast<std::uint8_t>(i);
  }
  return std::nullopt;
}

// The fields of each op, in order (the same in every layout).
using F = detail::Field;
constexpr F u32f = F::u32, i64f = F::i64, keyf = F::key, valuef = F::value, key_listf = F::key_list,
            pair_listf = F::pair_list;
constexpr F kU32[] = {u32f};
constexpr F kKey[] = {keyf};
constexpr F kKeyValue[] = {keyf, valuef};
constexpr F kCompareSet[] = {keyf, valuef, valuef};
constexpr F kAdd[] = {keyf, i64f};
constexpr F kKeyList[] = {key_listf};
constexpr F kPairList[] = {pair_listf};

struct Program {
  const F* fields;
  std::size_t n;
};
Program program(Op op) {
  switch (op) {
    case Op::validate:
    case Op::ping:
      return {kU32, 1};
    case Op::set:
    case Op::append:
    case Op::queue_push:
      return {kKeyValue, 2};
    case Op::compare_set:
      return {kCompareSet, 3};
    case Op::get:
    case Op::watch_key:
    case Op::delete_key:
    case Op::queue_pop:
    case Op::queue_len:
      return {kKey, 1};
    case Op::add:
      return {kAdd, 2};
    case Op::check:
    case Op::wait:
    case Op::multi_get:
      return {kKeyList, 1};
    case Op::multi_set:
      return {kPairList, 1};
    case Op::num_keys:
    case Op::cancel_wait:
    case Op::list:
      return {nullptr, 0};
  }
  return {nullptr, 0};
}

template <typename U>
U get_le(std::string_view b, std::size_t at) {
  U v = 0;
  for (std::size_t i = 0; i < sizeof(U); ++i) {
    v = static_cast<U>(v | (static_cast<U>(static_cast<std::uint8_t>(b[at + i])) << (8 * i)));
  }
  return v;
}
template <typename U>
void put_le(std::string& out, U v) {
  for (std::size_t i = 0; i < sizeof(U); ++i)
    out.push_back(static_cast<char>(static_cast<std::uint8_t>(v >> (8 * i))));
}

void put_list(std::string& out, const std::vector<std::string>& items) {
  put_le<std::uint64_t>(out, items.size());
  for (const auto& s : items) put_bytes(out, s);
}

void put_fields(std::string& out, const Request& r) {
  const Program p = program(r.op);
  std::size_t value = 0;
  for (std::size_t i = 0; i < p.n; ++i) {
    switch (p.fields[i]) {
      case u32f:
        put_u32(out, r.u32);
        break;
      case i64f:
        put_i64(out, r.number);
        break;
      case keyf:
        put_bytes(out, r.keys.empty() ? std::string_view() : std::string_view(r.keys[0]));
        break;
      case valuef:
        put_bytes(out, value < r.values.size() ? std::string_view(r.values[value]) : std::string_view());
        ++value;
        break;
      case key_listf:
        put_list(out, r.keys);
        break;
      case pair_listf:
        put_le<std::uint64_t>(out, r.keys.size());
        for (std::size_t k = 0; k < r.keys.size(); ++k) {
          put_bytes(out, r.keys[k]);
          put_bytes(out, k < r.values.size() ? std::string_view(r.values[k]) : std::string_view());
        }
        break;
    }
  }
}

}  // namespace

const char* to_string(Layout l) {
  switch (l) {
    case Layout::v1:
      return "1.x-2.0";
    case Layout::v21:
      return "2.1";
    case Layout::v22:
      return "2.2+";
  }
  return "?";
}

const char* to_string(Op op) {
  static constexpr const char* names[kOpCount] = {
      "VALIDATE",   "SET",        "COMPARE_SET", "GET",       "ADD",       "CHECK",     "WAIT",
      "GETNUMKEYS", "WATCH_KEY",  "DELETE_KEY",  "APPEND",    "MULTI_GET", "MULTI_SET", "CANCEL_WAIT",
      "PING",       "QUEUE_PUSH", "QUEUE_POP",   "QUEUE_LEN", "LIST"};
  const auto i = static_cast<std::size_t>(op);
  return i < kOpCount ? names[i] : "?";
}

std::optional<Op> decode_op(Layout l, std::uint8_t byte) {
  switch (l) {
    case Layout::v1:
      return in_table(kV1, byte);
    case Layout::v21:
      return in_table(kV21, byte);
    case Layout::v22:
      return in_table(kV22, byte);
  }
  return std::nullopt;
}

std::optional<std::uint8_t> encode_op(Layout l, Op op) {
  switch (l) {
    case Layout::v1:
      return index_of(kV1, op);
    case Layout::v21:
      return index_of(kV21, op);
    case Layout::v22:
      return index_of(kV22, op);
  }
  return std::nullopt;
}

std::optional<std::string> encode_request(Layout l, const Request& r) {
  const auto code = encode_op(l, r.op);
  if (!code) return std::nullopt;
  std::string out;
  put_u8(out, *code);
  put_fields(out, r);
  return out;
}

std::string encode_tagged(const Request& r) {
  std::string out;
  put_u32(out, r.tag);
  // WATCH_KEY exists only in 1.x-2.0; a relay forwards it under an opcode 2.2+ does not use.
  put_u8(out, r.op == Op::watch_key ? kRelayWatchKey : *encode_op(Layout::v22, r.op));
  put_fields(out, r);
  return out;
}

void put_u8(std::string& out, std::uint8_t v) {
  out.push_back(static_cast<char>(v));
}
void put_u32(std::string& out, std::uint32_t v) {
  put_le(out, v);
}
void put_i64(std::string& out, std::int64_t v) {
  put_le(out, static_cast<std::uint64_t>(v));
}
void put_bytes(std::string& out, std::string_view bytes) {
  put_le<std::uint64_t>(out, bytes.size());
  out.append(bytes);
}

std::size_t begin_tagged(std::string& out, std::uint32_t tag) {
  const std::size_t start = out.size();
  put_u32(out, tag);
  put_u32(out, 0);
  return start;
}
void end_tagged(std::string& out, std::size_t start) {
  const auto len = static_cast<std::uint32_t>(out.size() - start - kTaggedHeader);
  for (std::size_t i = 0; i < 4; ++i)
    out[start + 4 + i] = static_cast<char>(static_cast<std::uint8_t>(len >> (8 * i)));
}

void put_watch_event(std::string& out, WatchEvent type, std::string_view key, std::string_view old_value,
                     std::string_view new_value) {
  put_u8(out, static_cast<std::uint8_t>(type));
  put_bytes(out, key);
  put_bytes(out, old_value);
  put_bytes(out, new_value);
}

std::uint32_t get_u32(std::string_view bytes, std::size_t at) {
  return get_le<std::uint32_t>(bytes, at);
}
std::int64_t get_i64(std::string_view bytes, std::size_t at) {
  return static_cast<std::int64_t>(get_le<std::uint64_t>(bytes, at));
}

std::optional<Opening> sniff(std::string_view b) {
  if (b.empty()) return std::nullopt;
  const auto first = static_cast<std::uint8_t>(b[0]);
  if (first != 0 && first != kRelayByte) return Opening::legacy;
  if (b.size() < 5) return std::nullopt;
  const std::uint32_t magic = get_u32(b, 1);
  if (first == 0 && magic == kValidateMagic) return Opening::v22;
  if (first == kRelayByte && magic == kRelayMagic) return Opening::relay;
  // A legacy SET whose key length's low half is the magic would be a 1 GB key: not a client.
  return Opening::legacy;
}

Parser::Parser(const Limits& limits, Layout legacy)
    : limits_(limits),
      layout_(legacy == Layout::v22 ? Layout::v1 : legacy),
      legacy_fixed_(legacy == Layout::v21) {}

void Parser::start(Op op) {
  req_.op = op;
  const Program p = program(op);
  fields_ = p.fields;
  nfields_ = p.n;
  field_ = 0;
  count_.reset();
  pair_value_ = false;
  in_op_ = true;
}

bool Parser::string_field(std::string_view& in, bool is_key, std::string& out) {
  if (in.size() < 8) {
    needed_ = 8;
    return false;
  }
  const auto len = static_cast<std::uint64_t>(get_i64(in, 0));
  const std::size_t cap = is_key ? limits_.max_key : limits_.max_value;
  if (len > cap) {
    bad(fmt::format("{} of {} bytes in {} is over the limit of {} bytes", is_key ? "a key" : "a value", len,
                    to_string(req_.op), cap));
  }
  if (held_ + len > limits_.max_request) {
    bad(fmt::format("{} carries more than {} bytes", to_string(req_.op), limits_.max_request));
  }
  if (in.size() - 8 < len) {
    needed_ = 8 + static_cast<std::size_t>(len);
    return false;
  }
  out.assign(in.substr(8, static_cast<std::size_t>(len)));
  in.remove_prefix(8 + static_cast<std::size_t>(len));
  held_ += static_cast<std::size_t>(len);
  return true;
}

bool Parser::field(std::string_view& in, Field f) {
  switch (f) {
    case Field::u32:
      if (in.size() < 4) {
        needed_ = 4;
        return false;
      }
      req_.u32 = get_u32(in, 0);
      in.remove_prefix(4);
      return true;
    case Field::i64:
      if (in.size() < 8) {
        needed_ = 8;
        return false;
      }
      req_.number = get_i64(in, 0);
      in.remove_prefix(8);
      return true;
    case Field::key:
      req_.keys.emplace_back();
      if (string_field(in, true, req_.keys.back())) return true;
      req_.keys.pop_back();
      return false;
    case Field::value:
      req_.values.emplace_back();
      if (string_field(in, false, req_.values.back())) return true;
      req_.values.pop_back();
      return false;
    case Field::key_list:
    case Field::pair_list: {
      if (!count_) {
        if (in.size() < 8) {
          needed_ = 8;
          return false;
        }
        const auto n = static_cast<std::uint64_t>(get_i64(in, 0));
        if (n > limits_.max_keys) {
          bad(fmt::format("{} with {} keys is over the limit of {}", to_string(req_.op), n,
                          limits_.max_keys));
        }
        in.remove_prefix(8);
        count_ = n;
        req_.keys.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(n, 1024)));
      }
      while (req_.keys.size() < *count_ || pair_value_) {
        if (f == Field::pair_list && pair_value_) {
          if (!field(in, Field::value)) return false;
          pair_value_ = false;
          continue;
        }
        if (!field(in, Field::key)) return false;
        if (f == Field::pair_list) pair_value_ = true;
      }
      return true;
    }
  }
  return false;
}

std::optional<Request> Parser::next(std::string_view& in) {
  if (!sniffed_) {
    const auto opening = sniff(in);
    if (!opening) {
      needed_ = 5;
      return std::nullopt;
    }
    sniffed_ = true;
    if (*opening == Opening::v22) {
      layout_ = Layout::v22;
    } else if (*opening == Opening::relay) {
      layout_ = Layout::v22;
      tagged_ = true;
      in.remove_prefix(5);
    }
  }
  if (!in_op_) {
    if (tagged_ && !have_tag_) {
      if (in.size() < 4) {
        needed_ = 4;
        return std::nullopt;
      }
      req_.tag = get_u32(in, 0);
      in.remove_prefix(4);
      have_tag_ = true;
    }
    if (in.empty()) {
      needed_ = 1;
      return std::nullopt;
    }
    const auto byte = static_cast<std::uint8_t>(in[0]);
    std::optional<Op> op;
    if (tagged_ && byte == kRelayWatchKey) {
      op = Op::watch_key;
    } else {
      op = decode_op(layout_, byte);
      if (!op && layout_ == Layout::v1 && !legacy_fixed_ && byte >= 9 && byte <= 11) {
        layout_ = Layout::v21;  // only torch 2.1 sends these: the documented switch
        op = decode_op(layout_, byte);
      }
    }
    if (!op) bad(fmt::format("unknown opcode {} for a torch {} client", byte, to_string(layout_)));
    in.remove_prefix(1);
    start(*op);
  }
  while (field_ < nfields_) {
    if (!field(in, fields_[field_])) return std::nullopt;
    ++field_;
    count_.reset();
  }
  Request done = std::move(req_);
  req_ = Request{};
  in_op_ = false;
  have_tag_ = false;
  held_ = 0;
  needed_ = 1;
  return done;
}

}  // namespace ddprun::store::c10d
