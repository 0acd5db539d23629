#pragma once
// What `ddprun top` shows (docs/observe.md), from the nodes' status records. Pure: the JSON object
// (--format json), the text table (--once, and each frame of the live view), the order of the ranks.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.hpp"

namespace ddprun::launcher {

// One rank as `top` reports it; seconds_since_progress is the agent's figure plus the record's age
// (now - its publication, by the wall clocks, never negative), so a rank whose agent went silent
// still grows; a live rank's run time grows the same way.
struct TopRank {
  int node_rank = 0;
  std::string host;
  core::RankStatus status;
  std::optional<double> seconds_since_progress;
};

// Every rank of `nodes`, the slowest or silent first: hung, then live ranks by seconds since their
// progress (longest first), then ended ranks; ties by rank.
std::vector<TopRank> ranks_slowest_first(const std::vector<core::NodeStatus>& nodes, std::int64_t now_ms);

// The --format json object: {"job": {...}, "nodes": [...], "ranks": [...]} (ranks by rank).
nlohmann::json top_json(const std::vector<core::NodeStatus>& nodes, const std::string& endpoint,
                        const std::string& run_id, std::int64_t now_ms);

// The text view: a header, then one line per rank (slowest first) or per node, each cut to
// `width` columns (0: not cut); at most `max_lines` lines in all (0: every line); `keys`: the header
// names the live view's keys.
std::string top_text(const std::vector<core::NodeStatus>& nodes, const std::string& target,
                     std::int64_t now_ms, bool by_node, std::size_t width = 0, std::size_t max_lines = 0,
                     bool keys = false);

// Cuts `s` to `width` columns (one per character; UTF-8 aware).
std::string fit_columns(const std::string& s, std::size_t width);

}  // namespace ddprun::launcher
