#include "launcher/observe/top_view.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>

#include "core/json.hpp"

namespace ddprun::launcher {

namespace {

// Seconds the record has aged since its agent published it (clock skew never makes it negative).
double record_age(const core::NodeStatus& n, std::int64_t now_ms) {
  return static_cast<double>(std::max<std::int64_t>(0, now_ms - n.published_ms)) / 1000.0;
}

bool ended(core::RankState s) {
  return s == core::RankState::exited || s == core::RankState::stopped;
}

// 0 sorts first: hung, then live, then ended.
int state_group(core::RankState s) {
  return s == core::RankState::hung ? 0 : ended(s) ? 2 : 1;
}

std::string human_bytes(const std::optional<std::uint64_t>& b) {
  if (!b) return "-";
  const char* units[] = {"B", "K", "M", "G", "T"};
  double v = static_cast<double>(*b);
  std::size_t u = 0;
  while (v >= 1024 && u + 1 < std::size(units)) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{}B", *b) : fmt::format("{:.1f}{}", v, units[u]);
}

std::string seconds_text(const std::optional<double>& s) {
  if (!s) return "-";
  if (*s < 100) return fmt::format("{:.1f}s", *s);
  if (*s < 6000) return fmt::format("{:.0f}m{:02.0f}s", std::floor(*s / 60), std::fmod(*s, 60.0));
  return fmt::format("{:.0f}h{:02.0f}m", std::floor(*s / 3600), std::floor(std::fmod(*s, 3600.0) / 60));
}

std::string state_text(const core::RankStatus& r) {
  if (ended(r.state) && r.exit_code) return fmt::format("{}({})", core::to_string(r.state), *r.exit_code);
  return core::to_string(r.state);
}

template <class T>
nlohmann::json opt(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

double tenths(double s) {
  return std::round(s * 10.0) / 10.0;
}

std::string clock_text(std::int64_t now_ms) {
  const std::time_t t = static_cast<std::time_t>(now_ms / 1000);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%H:%M:%S UTC", &tm);
  return buf;
}

}  // namespace

std::vector<TopRank> ranks_slowest_first(const std::vector<core::NodeStatus>& nodes, std::int64_t now_ms) {
  std::vector<TopRank> out;
  for (const auto& n : nodes) {
    const double age = record_age(n, now_ms);
    for (const auto& r : n.ranks) {
      TopRank t{n.node_rank, n.host, r, std::nullopt};
      if (!ended(r.state)) {
        t.status.run_seconds += age;  // as of now, like the silence
        if (r.progress_age) t.seconds_since_progress = *r.progress_age + age;
      }
      out.push_back(std::move(t));
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const TopRank& a, const TopRank& b) {
    const int ga = state_group(a.status.state), gb = state_group(b.status.state);
    if (ga != gb) return ga < gb;
    const double sa = a.seconds_since_progress.value_or(-1), sb = b.seconds_since_progress.value_or(-1);
    if (sa != sb) return sa > sb;
    return a.status.rank < b.status.rank;
  });
  return out;
}

nlohmann::json top_json(const std::vector<core::NodeStatus>& nodes, const std::string& endpoint,
                        const std::string& run_id, std::int64_t now_ms) {
  nlohmann::json job = {{"endpoint", endpoint}, {"run_id", run_id}, {"time_ms", now_ms}};
  if (!nodes.empty()) {
    const auto& node0 = nodes.front();
    job["attempt"] = node0.attempt;
    job["restarts"] = node0.attempt;
    job["world_size"] = node0.world_size;
    job["nnodes"] = node0.nnodes;
    job["nodes_reporting"] = nodes.size();
    job["elastic_events"] = node0.elastic_events;
  }
  nlohmann::json jnodes = nlohmann::json::array();
  for (const auto& n : nodes) {
    jnodes.push_back({{"node_rank", n.node_rank},
                      {"host", n.host},
                      {"agent_state", n.agent_state},
                      {"attempt", n.attempt},
                      {"ranks", n.ranks.size()},
                      {"status_age_s", tenths(record_age(n, now_ms))}});
  }
  auto ranks = ranks_slowest_first(nodes, now_ms);
  std::sort(ranks.begin(), ranks.end(),
            [](const TopRank& a, const TopRank& b) { return a.status.rank < b.status.rank; });
  nlohmann::json jranks = nlohmann::json::array();
  for (const auto& t : ranks) {
    const auto& r = t.status;
    jranks.push_back({{"rank", r.rank},
                      {"local_rank", r.local_rank},
                      {"node_rank", t.node_rank},
                      {"host", t.host},
                      {"pid", r.pid},
                      {"state", core::to_string(r.state)},
                      {"exit_code", opt(r.exit_code)},
                      {"run_seconds", tenths(r.run_seconds)},
                      {"last_line", r.last_line},
                      {"seconds_since_progress", t.seconds_since_progress
                                                     ? nlohmann::json(tenths(*t.seconds_since_progress))
                                                     : nlohmann::json(nullptr)},
                      {"step", opt(r.step)},
                      {"rss_bytes", opt(r.rss_bytes)},
                      {"cpu_percent", opt(r.cpu_percent)},
                      {"restarts", r.restarts}});
  }
  return {{"job", job}, {"nodes", jnodes}, {"ranks", jranks}};
}

std::string fit_columns(const std::string& s, std::size_t width) {
  if (width == 0) return s;
  std::size_t cols = 0, i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (cols + 1 > width) break;
    ++cols;
    i += len;
  }
  return s.substr(0, std::min(i, s.size()));
}

std::string top_text(const std::vector<core::NodeStatus>& nodes, const std::string& target,
                     std::int64_t now_ms, bool by_node, std::size_t width, std::size_t max_lines, bool keys) {
  std::vector<std::string> lines;
  if (!nodes.empty()) {
    const auto& node0 = nodes.front();
    lines.push_back(fmt::format("ddprun top  {}  {}", target, clock_text(now_ms)));
    const char* view = by_node ? "per node" : "per rank, slowest first";
    const char* hint = !keys ? "" : by_node ? "; n: per rank, q: quit" : "; n: per node, q: quit";
    lines.push_back(fmt::format("attempt {}  world size {}  nodes {}/{} reporting  elastic events {}  ({}{})",
                                node0.attempt, node0.world_size, nodes.size(), node0.nnodes,
                                node0.elastic_events, view, hint));
  }
  lines.emplace_back();
  if (by_node) {
    lines.push_back(fmt::format("{:>5} {:<16} {:<17} {:>5} {:>5} {:>8} {:>8} {:>7} {:>6}", "NODE", "HOST",
                                "AGENT", "RANKS", "LIVE", "SILENT", "RSS", "CPU%", "AGE"));
    for (const auto& n : nodes) {
      int live = 0;
      std::optional<double> silent;
      std::uint64_t rss = 0;
      double cpu = 0;
      for (const auto& r : n.ranks) {
        if (ended(r.state)) continue;
        ++live;
        if (r.progress_age) silent = std::max(silent.value_or(0), *r.progress_age + record_age(n, now_ms));
        rss += r.rss_bytes.value_or(0);
        cpu += r.cpu_percent.value_or(0);
      }
      lines.push_back(fmt::format("{:>5} {:<16} {:<17} {:>5} {:>5} {:>8} {:>8} {:>7.1f} {:>6}", n.node_rank,
                                  fit_columns(n.host, 16), n.agent_state, n.ranks.size(), live,
                                  seconds_text(silent), human_bytes(rss), cpu,
                                  seconds_text(record_age(n, now_ms))));
    }
  } else {
    lines.push_back(fmt::format("{:>5} {:>4} {:<12} {:>8} {:<11} {:>8} {:>8} {:>7} {:>6}  {}", "RANK", "NODE",
                                "HOST", "PID", "STATE", "SILENT", "RUN", "RSS", "CPU%", "LAST LINE"));
    for (const auto& t : ranks_slowest_first(nodes, now_ms)) {
      const auto& r = t.status;
      lines.push_back(
          fmt::format("{:>5} {:>4} {:<12} {:>8} {:<11} {:>8} {:>8} {:>7} {:>6}  {}", r.rank, t.node_rank,
                      fit_columns(t.host, 12), r.pid, state_text(r), seconds_text(t.seconds_since_progress),
                      seconds_text(r.run_seconds), human_bytes(r.rss_bytes),
                      r.cpu_percent ? fmt::format("{:.1f}", *r.cpu_percent) : std::string("-"), r.last_line));
    }
  }
  std::string out;
  std::size_t n = 0;
  for (const auto& l : lines) {
    if (max_lines != 0 && n++ >= max_lines) break;
    out += fit_columns(l, width);
    out += '\n';
  }
  return out;
}

}  // namespace ddprun::launcher
