#include "core/utf8.hpp"

#include <algorithm>
#include <utility>

namespace ddprun::core {

namespace {

// The sequence's length from its first byte, and the range its second byte must lie in.
struct Lead {
  std::size_t n = 0;  // 0: no lead byte
  unsigned lo = 0x80;
  unsigned hi = 0xBF;
};

Lead lead(unsigned char c) {
  if (c < 0x80) return {1};
  if (c >= 0xC2 && c <= 0xDF) return {2};
  if (c >= 0xE0 && c <= 0xEF) return {3, c == 0xE0 ? 0xA0u : 0x80u, c == 0xED ? 0x9Fu : 0xBFu};
  if (c >= 0xF0 && c <= 0xF4) return {4, c == 0xF0 ? 0x90u : 0x80u, c == 0xF4 ? 0x8Fu : 0xBFu};
  return {};
}

// How many bytes of the sequence starting at s[i] are right, up to its length or the end of `s`.
std::size_t good_bytes(std::string_view s, std::size_t i, const Lead& l) {
  std::size_t k = 1;
  for (; k < l.n && i + k < s.size(); ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    const unsigned lo = k == 1 ? l.lo : 0x80u;
    const unsigned hi = k == 1 ? l.hi : 0xBFu;
    if (b < lo || b > hi) break;
  }
  return k;
}

}  // namespace

std::size_t utf8_length(std::string_view s, std::size_t i) {
  if (i >= s.size()) return 0;
  const Lead l = lead(static_cast<unsigned char>(s[i]));
  if (l.n == 0) return 0;
  return good_bytes(s, i, l) == l.n ? l.n : 0;
}

bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string_view without_cut_character(std::string_view s) {
  // A sequence is at most 4 bytes: its lead byte is among the last 3.
  for (std::size_t back = 1; back <= std::min<std::size_t>(3, s.size()); ++back) {
    const std::size_t i = s.size() - back;
    const Lead l = lead(static_cast<unsigned char>(s[i]));
    if (l.n == 0) continue;  // a continuation byte (or not UTF-8): look further back
    // Cut only a sequence that is right so far and lacks its last bytes.
    return l.n > back && good_bytes(s, i, l) == back ? s.substr(0, i) : s;
  }
  return s;
}

std::string to_hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    out += kDigits[b >> 4];
    out += kDigits[b & 0xF];
  }
  return out;
}

bool from_hex(std::string_view hex, std::string& out) {
  const auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (hex.size() % 2 != 0) return false;
  std::string bytes;
  bytes.reserve(hex.size() / 2);
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    const int hi = digit(hex[i]);
    const int lo = digit(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    bytes += static_cast<char>(hi * 16 + lo);
  }
  out = std::move(bytes);
  return true;
}

}  // namespace ddprun::core
