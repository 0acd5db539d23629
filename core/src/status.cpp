#include "core/status.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>

#include "core/error.hpp"
#include "core/json.hpp"
#include "core/utf8.hpp"

namespace ddprun::core {

namespace {

std::optional<std::uint64_t> to_u64(std::string_view t) {
  std::uint64_t v = 0;
  const auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc{} || p != t.data() + t.size() || t.empty()) return std::nullopt;
  return v;
}

// The whitespace-separated fields of `s`.
std::vector<std::string_view> fields(std::string_view s) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t')) ++i;
    const std::size_t start = i;
    while (i < s.size() && s[i] != ' ' && s[i] != '\n' && s[i] != '\t') ++i;
    if (i > start) out.push_back(s.substr(start, i - start));
  }
  return out;
}

template <class T>
nlohmann::json opt(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

// Seconds with a tenth's precision: the record stays short.
double tenths(double s) {
  return std::round(s * 10.0) / 10.0;
}

}  // namespace

const char* to_string(RankState s) {
  return name_of(kRankStateNames, s, "?");
}

std::optional<RankState> rank_state_from_string(std::string_view s) {
  return value_of(kRankStateNames, s);
}

std::string encode_node_status(const NodeStatus& s) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : s.ranks) {
    ranks.push_back(
        {{"r", r.rank},
         {"l", r.local_rank},
         {"p", r.pid},
         {"s", to_string(r.state)},
         {"c", opt(r.exit_code)},
         {"u", tenths(r.run_seconds)},
         {"o", r.last_line},
         {"g", r.progress_age ? nlohmann::json(tenths(*r.progress_age)) : nlohmann::json(nullptr)},
         {"k", opt(r.step)},
         {"m", opt(r.rss_bytes)},
         {"cpu", r.cpu_percent ? nlohmann::json(tenths(*r.cpu_percent)) : nlohmann::json(nullptr)},
         {"x", r.restarts}});
  }
  const nlohmann::json j = {{"v", 1},
                            {"n", s.node_rank},
                            {"h", s.host},
                            {"a", s.agent_state},
                            {"t", s.published_ms},
                            {"at", s.attempt},
                            {"ws", s.world_size},
                            {"nn", s.nnodes},
                            {"el", s.elastic_events},
                            {"r", ranks}};
  return dump_json(j);
}

NodeStatus decode_node_status(std::string_view record) {
  try {
    const auto j = nlohmann::json::parse(record);
    if (json_int<int>(j.at("v")) != 1) throw Error("unknown status record version");
    NodeStatus s;
    s.node_rank = json_int<int>(j.at("n"));
    s.host = j.at("h").get<std::string>();
    s.agent_state = j.at("a").get<std::string>();
    s.published_ms = json_int<std::int64_t>(j.at("t"));
    s.attempt = json_int<int>(j.at("at"));
    s.world_size = json_int<int>(j.at("ws"));
    s.nnodes = json_int<int>(j.at("nn"));
    s.elastic_events = json_int<int>(j.at("el"));
    for (const auto& r : j.at("r")) {
      RankStatus x;
      x.rank = json_int<int>(r.at("r"));
      x.local_rank = json_int<int>(r.at("l"));
      x.pid = json_int<std::int64_t>(r.at("p"));
      const auto state = rank_state_from_string(r.at("s").get<std::string>());
      if (!state) throw Error(fmt::format("unknown rank state {}", dump_json(r.at("s"))));
      x.state = *state;
      if (!r.at("c").is_null()) x.exit_code = json_int<int>(r.at("c"));
      x.run_seconds = r.at("u").get<double>();
      x.last_line = r.at("o").get<std::string>();
      if (!r.at("g").is_null()) x.progress_age = r.at("g").get<double>();
      if (!r.at("k").is_null()) x.step = json_int<std::int64_t>(r.at("k"));
      if (!r.at("m").is_null()) x.rss_bytes = json_int<std::uint64_t>(r.at("m"));
      if (!r.at("cpu").is_null()) x.cpu_percent = r.at("cpu").get<double>();
      x.restarts = json_int<int>(r.at("x"));
      s.ranks.push_back(std::move(x));
    }
    return s;
  } catch (const Error& e) {
    throw Error(fmt::format("malformed status record: {}", e.what()), 1);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("malformed status record: {}", e.what()), 1);
  }
}

std::string_view visible_part(std::string_view line) {
  while (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (const auto cr = line.rfind('\r'); cr != std::string_view::npos) line = line.substr(cr + 1);
  return line;
}

std::string clean_status_line(std::string_view line, std::size_t max) {
  line = visible_part(line);
  std::string out;
  std::size_t i = 0;
  while (i < line.size()) {
    const std::size_t n = utf8_length(line, i);
    std::string_view piece;
    if (n == 0) {
      piece = "\xEF\xBF\xBD";  // U+FFFD for one invalid byte
    } else if (n == 1) {
      const auto c = static_cast<unsigned char>(line[i]);
      piece = c < 0x20 || c == 0x7F ? std::string_view(" ") : line.substr(i, 1);
    } else {
      piece = line.substr(i, n);
    }
    if (out.size() + piece.size() > max) break;
    out += piece;
    i += n == 0 ? 1 : n;
  }
  return out;
}

std::optional<std::uint64_t> parse_proc_stat_cpu_ticks(std::string_view stat) {
  const auto close = stat.rfind(')');
  if (close == std::string_view::npos) return std::nullopt;
  // After ")": state is field 3, so utime (14) and stime (15) are the 12th and 13th there.
  const auto f = fields(stat.substr(close + 1));
  if (f.size() < 13) return std::nullopt;
  const auto utime = to_u64(f[11]);
  const auto stime = to_u64(f[12]);
  if (!utime || !stime) return std::nullopt;
  return *utime + *stime;
}

std::optional<std::uint64_t> parse_proc_statm_resident_pages(std::string_view statm) {
  const auto f = fields(statm);
  if (f.size() < 2) return std::nullopt;
  return to_u64(f[1]);
}

std::optional<double> cpu_percent(std::uint64_t ticks_before, std::uint64_t ticks_now, double elapsed_s,
                                  long ticks_per_second) {
  if (elapsed_s <= 0 || ticks_per_second <= 0 || ticks_now < ticks_before) return std::nullopt;
  return static_cast<double>(ticks_now - ticks_before) / static_cast<double>(ticks_per_second) / elapsed_s *
         100.0;
}

std::int64_t status_interval_ms(int nnodes) {
  const std::int64_t by_rate =
      (static_cast<std::int64_t>(std::max(nnodes, 1)) * 1000 + kMaxStatusRate - 1) / kMaxStatusRate;
  return std::max<std::int64_t>(1000, by_rate);
}

std::string status_key(int node_rank) {
  return fmt::format("/status/{}", node_rank);
}

RankState rank_state(const WorkerFacts& w) {
  if (w.exited) return w.stopped_by_ddprun ? RankState::stopped : RankState::exited;
  if (w.hung) return RankState::hung;
  return w.progressed ? RankState::running : RankState::starting;
}

const char* agent_state_of(bool all_exited, bool collecting_stacks, bool stopping) {
  if (all_exited) return "finished";
  if (collecting_stacks) return "collecting_stacks";
  return stopping ? "stopping" : "running";
}

}  // namespace ddprun::core
