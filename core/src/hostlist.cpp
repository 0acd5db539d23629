// Slurm hostlist expressions and count lists. See docs/hostlist.md for the accepted grammar.
#include "core/hostlist.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

#include <fmt/format.h>

namespace ddprun::core {
namespace {

constexpr std::size_t kMaxShownChars = 120;  // longer expressions are shown as a window around the error

bool is_separator(char c) {
  return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

bool is_control(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u < 0x20 || u == 0x7f;
}

// A character a host name may hold: anything but separators, brackets and control characters.
bool is_name_char(char c) {
  return !is_separator(c) && c != '[' && c != ']' && !is_control(c);
}

// The expression as it appears in a one-line message: control characters escaped, long input cut to
// a window around `pos` (positions in the message always refer to the full expression).
std::string shown(std::string_view expr, std::size_t pos) {
  std::size_t begin = 0;
  std::size_t end = expr.size();
  if (expr.size() > kMaxShownChars) {
    begin = pos > kMaxShownChars / 2 ? pos - kMaxShownChars / 2 : 0;
    end = std::min(expr.size(), begin + kMaxShownChars);
  }
  std::string out = begin > 0 ? "..." : "";
  for (std::size_t i = begin; i < end; ++i) {
    const char c = expr[i];
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (is_control(c)) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
    } else {
      out += c;
    }
  }
  if (end < expr.size()) out += "...";
  return out;
}

[[noreturn]] void fail(std::string_view expr, std::size_t pos, std::string_view what, std::string_view hint) {
  throw Error(
      fmt::format("invalid hostlist \"{}\" at position {}: {}; {}", shown(expr, pos), pos, what, hint));
}

std::string pad(std::uint64_t value, std::size_t width) {
  std::string digits = std::to_string(value);
  if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
  return digits;
}

// Decimal digits to a number; false when it does not fit in 64 bits.
bool to_u64(std::string_view digits, std::uint64_t& value) {
  value = 0;
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  for (const char c : digits) {
    const auto d = static_cast<std::uint64_t>(c - '0');
    if (value > (kMax - d) / 10) return false;
    value = value * 10 + d;
  }
  return true;
}

// One "[...]" of an item, already expanded to its numbers as written (padding applied).
struct Bracket {
  std::vector<std::string> values;
  std::size_t chars = 0;  // sum of value lengths
};

constexpr std::string_view kBracketHint =
    "brackets hold comma-separated numbers and lo-hi ranges, e.g. node[1-4,8]";

// expr[i] (or the end of expr) cannot stand where it is inside the bracket opened at `open`.
[[noreturn]] void bad_in_bracket(std::string_view expr, std::size_t open, std::size_t i) {
  if (i >= expr.size()) fail(expr, open, "missing ']' for this '['", "close every '[' with ']'");
  const char c = expr[i];
  if (c == '[') fail(expr, i, "nested '['", "brackets cannot be nested: close the first '[' with ']'");
  if (c == '-') fail(expr, i, "extra '-' in range", "write ranges as lo-hi, e.g. n[1-4]");
  if (is_separator(c)) {
    fail(expr, i, "whitespace inside brackets (missing ']'?)",
         "close every '[' with ']' and do not put spaces inside brackets");
  }
  fail(expr, i, fmt::format("'{}' inside brackets", shown(expr.substr(i, 1), 0)), kBracketHint);
}

// Reads a bracket starting at expr[open] == '['; returns the position after its ']'.
std::size_t parse_bracket(std::string_view expr, std::size_t open, Bracket& out) {
  std::size_t i = open + 1;
  if (i < expr.size() && expr[i] == ']') fail(expr, open, "empty brackets \"[]\"", kBracketHint);
  // The digits at expr[i], or the error for what stands there instead.
  auto read_number = [&](bool is_lo) -> std::string_view {
    const std::size_t begin = i;
    while (i < expr.size() && is_digit(expr[i])) ++i;
    if (i > begin) return expr.substr(begin, i - begin);
    if (i < expr.size() && expr[i] == '-' && is_lo) {
      fail(expr, i, "range starts with '-'",
           "numbers in brackets cannot be negative: write lo-hi, e.g. n[0-3]");
    }
    if (i < expr.size() && (expr[i] == ',' || expr[i] == ']')) {
      if (is_lo) fail(expr, i, "empty element in brackets", "remove the extra ','");
      fail(expr, i, "range has no upper bound", "write ranges as lo-hi, e.g. n[1-4]");
    }
    bad_in_bracket(expr, open, i);
  };
  for (;;) {
    // One element: digits, or digits '-' digits.
    const std::size_t start = i;
    const std::string_view lo_text = read_number(true);
    std::string_view hi_text = lo_text;
    if (i < expr.size() && expr[i] == '-') {
      ++i;
      hi_text = read_number(false);
    }
    std::uint64_t lo = 0;
    std::uint64_t hi = 0;
    if (!to_u64(lo_text, lo) || !to_u64(hi_text, hi)) {
      fail(expr, start, "number too large", "numbers in brackets must fit in 64 bits");
    }
    if (lo > hi) {
      fail(expr, start, fmt::format("range {}-{} has lo > hi", lo_text, hi_text),
           "write ranges as lo-hi with lo <= hi");
    }
    if (hi - lo >= kMaxRangeHosts) {
      fail(expr, start, fmt::format("range {}-{} has more than {} hosts", lo_text, hi_text, kMaxRangeHosts),
           "split it into smaller ranges or check the numbers");
    }
    if (out.values.size() + (hi - lo) >= kMaxTotalHosts) {
      fail(expr, open, fmt::format("brackets produce more than {} hosts", kMaxTotalHosts),
           "split the expression or check the ranges");
    }
    // Width comes from lo as written: [08-10] -> 08 09 10, [8-010] -> 8 9 10.
    const std::size_t width = lo_text.size();
    for (std::uint64_t v = lo;; ++v) {
      out.values.push_back(pad(v, width));
      out.chars += out.values.back().size();
      if (v == hi) break;
    }
    if (i < expr.size() && expr[i] == ']') return i + 1;
    if (i < expr.size() && expr[i] == ',') {
      ++i;
      continue;
    }
    bad_in_bracket(expr, open, i);
  }
}

// Order of the brackets from the outermost loop to the innermost, as Slurm expands them: the last
// bracket varies fastest; of the earlier ones, the right-most is the outermost loop.
std::vector<std::size_t> loop_order(std::size_t nbrackets) {
  std::vector<std::size_t> order;
  if (nbrackets == 0) return order;
  for (std::size_t b = nbrackets - 1; b-- > 0;) order.push_back(b);
  order.push_back(nbrackets - 1);
  return order;
}

// One item of a hostlist: literal texts around zero or more brackets (texts.size() == brackets.size() + 1).
struct Item {
  std::vector<std::string> texts = std::vector<std::string>(1);
  std::vector<Bracket> brackets;
};

// Reads one item from expr[i] up to the next separator; returns the position after it.
std::size_t parse_item(std::string_view expr, std::size_t i, Item& item) {
  while (i < expr.size() && !is_separator(expr[i])) {
    const char c = expr[i];
    if (c == '[') {
      item.brackets.emplace_back();
      i = parse_bracket(expr, i, item.brackets.back());
      item.texts.emplace_back();
    } else if (c == ']') {
      fail(expr, i, "']' without a matching '['", "remove it or add the missing '['");
    } else if (is_control(c)) {
      fail(expr, i, "control character", "host names are printable text");
    } else {
      item.texts.back() += c;
      ++i;
    }
  }
  return i;
}

// Sizes the item's expansion before building it: host count and exact bytes, within the caps
// (given what earlier items already produced). Returns the host count.
std::size_t check_item_size(std::string_view expr, std::size_t item_pos, const Item& item,
                            std::size_t hosts_so_far, std::size_t& total_chars) {
  std::size_t count = 1;
  for (const Bracket& b : item.brackets) {
    if (count > kMaxTotalHosts / b.values.size()) {
      count = kMaxTotalHosts + 1;
      break;
    }
    count *= b.values.size();
  }
  if (count > kMaxTotalHosts - hosts_so_far) {
    fail(expr, item_pos, fmt::format("expands to more than {} hosts", kMaxTotalHosts),
         "check the ranges or split the expression");
  }
  // Each bracket value appears count/size times, each text count times.
  std::size_t item_chars = 0;
  for (const std::string& t : item.texts) item_chars += t.size() * count;
  for (const Bracket& b : item.brackets) item_chars += b.chars * (count / b.values.size());
  if (item_chars > kMaxTotalChars - total_chars) {
    fail(expr, item_pos, fmt::format("expands to more than {} bytes of host names", kMaxTotalChars),
         "check the ranges or split the expression");
  }
  total_chars += item_chars;
  return count;
}

// Appends every host of the item, the brackets nested as Slurm nests them (an odometer).
void expand_item(const Item& item, std::vector<std::string>& hosts) {
  const auto& brackets = item.brackets;
  const std::vector<std::size_t> order = loop_order(brackets.size());
  std::vector<std::size_t> idx(brackets.size(), 0);
  for (;;) {
    std::string name = item.texts[0];
    for (std::size_t b = 0; b < brackets.size(); ++b) {
      name += brackets[b].values[idx[b]];
      name += item.texts[b + 1];
    }
    hosts.push_back(std::move(name));
    // Advance the odometer, innermost loop first.
    std::size_t level = order.size();
    while (level > 0) {
      const std::size_t b = order[level - 1];
      if (++idx[b] < brackets[b].values.size()) break;
      idx[b] = 0;
      --level;
    }
    if (level == 0) return;
  }
}

// A host split into text and its trailing number (if any, and if it fits in 64 bits).
struct Split {
  std::string_view prefix;
  std::string_view digits;  // empty: no foldable number
  std::uint64_t value = 0;
};

Split split_host(const std::string& name, std::size_t index) {
  for (const char c : name) {
    if (!is_name_char(c)) {
      throw Error(
          fmt::format("cannot write host \"{}\" (index {}) as a hostlist: names may not contain "
                      "brackets, commas, whitespace or control characters",
                      shown(name, 0), index));
    }
  }
  if (name.empty()) {
    throw Error(fmt::format("cannot write host {} as a hostlist: the name is empty", index));
  }
  std::size_t start = name.size();
  while (start > 0 && is_digit(name[start - 1])) --start;
  Split s{std::string_view(name), {}, 0};
  std::uint64_t value = 0;
  if (start < name.size() && to_u64(std::string_view(name).substr(start), value)) {
    s.prefix = std::string_view(name).substr(0, start);
    s.digits = std::string_view(name).substr(start);
    s.value = value;
  }
  return s;
}

// Writes the bracket contents of one group split[h, end): ranges of numbers that count up by one
// and print the same at the first one's width, joined by commas.
void write_ranges(const std::vector<Split>& split, std::size_t h, std::size_t end, std::string& out) {
  std::size_t r = h;
  while (r < end) {
    const std::size_t width = split[r].digits.size();
    std::size_t last = r;
    while (last + 1 < end && last + 1 - r < kMaxRangeHosts &&
           split[last].value != std::numeric_limits<std::uint64_t>::max() &&
           split[last + 1].value == split[last].value + 1 &&
           split[last + 1].digits == pad(split[last + 1].value, width)) {
      ++last;
    }
    if (r > h) out += ',';
    out += split[r].digits;
    if (last > r) {
      out += '-';
      out += split[last].digits;
    }
    r = last + 1;
  }
}

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view expr) {
  std::vector<std::string> hosts;
  std::size_t total_chars = 0;
  std::size_t i = 0;
  while (i < expr.size()) {
    if (is_separator(expr[i])) {
      ++i;
      continue;
    }
    const std::size_t item_pos = i;
    Item item;
    i = parse_item(expr, i, item);
    check_item_size(expr, item_pos, item, hosts.size(), total_chars);
    expand_item(item, hosts);
  }
  return hosts;
}

std::string compress_hostlist(const std::vector<std::string>& hosts) {
  std::vector<Split> split;
  split.reserve(hosts.size());
  for (std::size_t h = 0; h < hosts.size(); ++h) split.push_back(split_host(hosts[h], h));

  std::string out;
  std::size_t h = 0;
  while (h < split.size()) {
    if (!out.empty()) out += ',';
    // A group: consecutive hosts with the same prefix and a trailing number.
    std::size_t end = h + 1;
    if (!split[h].digits.empty()) {
      while (end < split.size() && !split[end].digits.empty() && split[end].prefix == split[h].prefix) ++end;
    }
    if (end - h == 1) {
      out += hosts[h];
    } else {
      out += split[h].prefix;
      out += '[';
      write_ranges(split, h, end, out);
      out += ']';
    }
    h = end;
  }
  return out;
}

std::vector<int> parse_count_list(std::string_view s) {
  auto bad = [&](std::size_t pos, std::string_view what) -> void {
    throw Error(fmt::format("invalid count list \"{}\" at position {}: {}; expected counts like 2(x3),1",
                            shown(s, pos), pos, what));
  };
  // Reads a positive-or-zero decimal int at s[i].
  auto number = [&](std::size_t& i, std::string_view what) -> long long {
    const std::size_t begin = i;
    long long v = 0;
    while (i < s.size() && is_digit(s[i])) {
      v = v * 10 + (s[i] - '0');
      if (v > std::numeric_limits<int>::max()) bad(begin, fmt::format("{} too large", what));
      ++i;
    }
    if (i == begin) {
      if (i < s.size() && s[i] == '-') bad(i, fmt::format("negative {}", what));
      bad(i, i < s.size() ? fmt::format("{} expected", what) : fmt::format("{} missing at end", what));
    }
    return v;
  };

  std::vector<int> counts;
  if (s.empty()) bad(0, "empty");
  std::size_t i = 0;
  for (;;) {
    const auto count = static_cast<int>(number(i, "count"));
    long long repeat = 1;
    if (i < s.size() && s[i] == '(') {
      const std::size_t open = i;
      if (i + 1 >= s.size() || s[i + 1] != 'x') bad(i + 1, "'x' expected after '('");
      i += 2;
      repeat = number(i, "repeat");
      if (repeat == 0) bad(open, "repeat of zero");
      if (i >= s.size() || s[i] != ')') bad(i, "')' expected");
      ++i;
    }
    if (static_cast<std::size_t>(repeat) > kMaxTotalHosts - counts.size()) {
      bad(0, fmt::format("more than {} entries", kMaxTotalHosts));
    }
    counts.insert(counts.end(), static_cast<std::size_t>(repeat), count);
    if (i == s.size()) break;
    if (s[i] != ',') bad(i, fmt::format("'{}' unexpected", shown(s.substr(i, 1), 0)));
    ++i;
  }
  return counts;
}

}  // namespace ddprun::core
