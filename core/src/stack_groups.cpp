#include "core/stack_groups.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>

#include "core/error.hpp"
#include "core/json.hpp"

namespace ddprun::core {

namespace {

int parse_rank(std::string_view s, std::string_view item) {
  int v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < 0) {
    throw Error(
        fmt::format("--rank {}: '{}' is not a rank (a number from 0, or a range such as 7-9)", item, s));
  }
  return v;
}

bool is_hex(char c) {
  return std::isxdigit(static_cast<unsigned char>(c)) != 0;
}

bool is_digit(char c) {
  return std::isdigit(static_cast<unsigned char>(c)) != 0;
}

}  // namespace

std::set<int> parse_rank_selection(std::string_view spec) {
  std::set<int> out;
  std::size_t pos = 0;
  for (;;) {
    const auto comma = spec.find(',', pos);
    const std::string_view item = spec.substr(pos, comma == std::string_view::npos ? spec.npos : comma - pos);
    if (item.empty()) throw Error(fmt::format("--rank '{}': an empty item; give ranks such as 3,7-9", spec));
    const auto dash = item.find('-');
    const int lo = parse_rank(item.substr(0, dash), item);
    const int hi = dash == std::string_view::npos ? lo : parse_rank(item.substr(dash + 1), item);
    if (hi < lo)
      throw Error(fmt::format("--rank {}: the range ends below its start; write it as {}-{}", item, hi, lo));
    if (static_cast<long long>(hi) - lo + static_cast<long long>(out.size()) >= kMaxSelectedRanks) {
      throw Error(fmt::format("--rank '{}': more than {} ranks", spec, kMaxSelectedRanks));
    }
    for (int r = lo; r <= hi; ++r) out.insert(r);
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return out;
}

std::string format_rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? fmt::format("{}", ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]);
    i = j + 1;
  }
  return out;
}

std::string stack_signature(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  const auto starts = [&](std::string_view w) { return text.substr(i, w.size()) == w; };
  while (i < text.size()) {
    if (starts("0x") && i + 2 < text.size() && is_hex(text[i + 2])) {
      out += "0x?";
      i += 2;
      while (i < text.size() && is_hex(text[i])) ++i;
      continue;
    }
    for (const std::string_view word : {std::string_view("PID "), std::string_view("TID ")}) {
      if (starts(word) && i + word.size() < text.size() && is_digit(text[i + word.size()])) {
        out += word;
        out += '?';
        i += word.size();
        while (i < text.size() && is_digit(text[i])) ++i;
        break;
      }
    }
    if (i < text.size()) out += text[i++];
  }
  return out;
}

std::vector<StackGroup> group_stacks(const std::vector<RankStack>& stacks) {
  std::map<std::string, std::size_t> index;  // signature -> group
  std::vector<StackGroup> groups;
  std::vector<RankStack> sorted = stacks;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const RankStack& a, const RankStack& b) { return a.rank < b.rank; });
  for (const auto& s : sorted) {
    const auto [it, fresh] = index.emplace(stack_signature(s.text), groups.size());
    if (fresh) groups.push_back({{}, s.text});
    groups[it->second].ranks.push_back(s.rank);
  }
  std::stable_sort(groups.begin(), groups.end(), [](const StackGroup& a, const StackGroup& b) {
    if (a.ranks.size() != b.ranks.size()) return a.ranks.size() > b.ranks.size();
    return a.ranks.front() < b.ranks.front();
  });
  return groups;
}

std::string format_stack_groups(const std::vector<StackGroup>& groups) {
  std::string out;
  for (const auto& g : groups) {
    out += g.ranks.size() == 1
               ? fmt::format("rank {}:\n", g.ranks.front())
               : fmt::format("ranks {} ({} ranks):\n", format_rank_list(g.ranks), g.ranks.size());
    std::size_t pos = 0;
    while (pos < g.text.size()) {
      const auto eol = g.text.find('\n', pos);
      const std::string_view line =
          std::string_view(g.text).substr(pos, eol == std::string::npos ? std::string::npos : eol - pos);
      out += "  ";
      out += line;
      out += '\n';
      if (eol == std::string::npos) break;
      pos = eol + 1;
    }
  }
  return out;
}

std::string stacks_reply_key(std::string_view nonce, int node_rank) {
  return fmt::format("/stacks/{}/{}", nonce, node_rank);
}

std::string encode_stacks_request(const StacksRequest& r) {
  nlohmann::json j = {{"nonce", r.nonce}, {"ranks", nullptr}};
  if (r.ranks) j["ranks"] = format_rank_list({r.ranks->begin(), r.ranks->end()});
  return dump_json(j);
}

StacksRequest decode_stacks_request(std::string_view text) {
  try {
    const auto j = nlohmann::json::parse(text);
    StacksRequest r;
    r.nonce = j.at("nonce").get<std::string>();
    const bool nonce_ok =
        !r.nonce.empty() && r.nonce.size() <= 64 && std::all_of(r.nonce.begin(), r.nonce.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) != 0;
        });
    if (!nonce_ok) throw Error("a stacks request with a bad nonce");
    if (!j.at("ranks").is_null()) r.ranks = parse_rank_selection(j.at("ranks").get<std::string>());
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("a malformed stacks request: {}", e.what()));
  }
}

std::string encode_node_stacks(const NodeStacks& n) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : n.ranks) ranks.push_back({{"rank", r.rank}, {"text", r.text}});
  return dump_json({{"node_rank", n.node_rank}, {"host", n.host}, {"ranks", ranks}});
}

NodeStacks decode_node_stacks(std::string_view text) {
  try {
    const auto j = nlohmann::json::parse(text);
    NodeStacks n;
    n.node_rank = json_int<int>(j.at("node_rank"));
    n.host = j.at("host").get<std::string>();
    for (const auto& r : j.at("ranks"))
      n.ranks.push_back({json_int<int>(r.at("rank")), r.at("text").get<std::string>()});
    return n;
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("a malformed stacks reply: {}", e.what()));
  }
}

std::optional<long> parse_stacks_marker(std::string_view head) {
  constexpr std::string_view kTag = "ddprun-stacks ";
  if (head.substr(0, kTag.size()) != kTag) return std::nullopt;
  head.remove_prefix(kTag.size());
  const auto nl = head.find('\n');
  if (nl == std::string_view::npos) return std::nullopt;  // not written whole yet
  long pid = 0;
  const auto [end, ec] = std::from_chars(head.data(), head.data() + nl, pid);
  if (ec != std::errc() || end != head.data() + nl || pid <= 0) return std::nullopt;
  return pid;
}

}  // namespace ddprun::core
