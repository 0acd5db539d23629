// Node 0's job-wide summary: one row per node from the gathered records (text and JSON).
#include <fmt/format.h>
#include <algorithm>
#include <map>
#include <set>

#include "agent/events.hpp"
#include "job_summary.hpp"

namespace ddprun::agent {

namespace {

struct Row {
  std::string node, host, ranks, result, duration;
  bool root = false;     // holds the root cause: the first row when rows are cut
  bool notable = false;  // explains the outcome: shown first when rows are cut
  bool stopped = false;  // only stopped by ddprun: the "*" footnote
  bool missing = false;
  std::string kind;  // what a hidden row is counted as
};

// Whether this node holds the root cause: its failed worker, or its agent stopped by a signal.
bool holds_root(const NodeRecord& n, const std::optional<Failure>& root) {
  if (!root || root->node_rank != n.node_rank) return false;
  if (root->rank >= 0) return n.failed_rank == root->rank;
  return n.agent_signal != 0 && root->signal == n.agent_signal;
}

std::string result_text(const NodeRecord& n) {
  if (n.success) return "ok";
  if (n.hung) return fmt::format("rank {}: hung", n.failed_rank);
  if (n.failed_rank >= 0) {
    if (n.spawn_failed) return fmt::format("rank {}: cannot start ({})", n.failed_rank, n.failed_exit);
    if (n.failed_signal != 0)
      return fmt::format("rank {}: {} ({})", n.failed_rank, signal_name(n.failed_signal), n.failed_exit);
    return fmt::format("rank {}: exit {}", n.failed_rank, n.failed_exit);
  }
  if (n.agent_signal != 0) return fmt::format("ddprun got {}", signal_name(n.agent_signal));
  if (n.stopped > 0) return "stopped *";
  // Its ranks ended by themselves, none failed: they exited 0 before another node's failure.
  return n.workers > 0 ? "exited 0" : "stopped";
}

Row missing_row(const PeerRecord& p, const std::optional<Failure>& root, bool per_task) {
  Row row;
  // Per-task mode: the record would have named the task's node; its plan rank is the task's.
  row.node = per_task ? "?" : std::to_string(p.node_rank);
  row.host = p.host;
  row.ranks = per_task ? std::to_string(p.node_rank) : "?";
  row.result = p.record ? "unreadable report" : "no report";
  row.root = !per_task && lost_node(root) == p.node_rank;
  if (row.root) row.result += " <- root cause";
  row.duration = "-";
  row.notable = true;
  row.missing = true;
  row.kind = "no report";
  return row;
}

Row make_row(const PeerRecord& p, const std::optional<Failure>& root, bool per_task) {
  const auto rec = p.record ? decode_node_record(*p.record) : std::nullopt;
  if (!rec) return missing_row(p, root, per_task);
  Row row;
  row.node = std::to_string(rec->node_rank);
  row.host = rec->host;
  row.ranks = rec->first_rank < 0                 ? "-"
              : rec->first_rank == rec->last_rank ? std::to_string(rec->first_rank)
                                                  : fmt::format("{}-{}", rec->first_rank, rec->last_rank);
  row.result = result_text(*rec);
  row.stopped = row.result == "stopped *";
  row.root = holds_root(*rec, root);
  if (row.root) row.result += " <- root cause";
  row.duration = fmt::format("{:.2f}s", rec->duration_s);
  row.notable = row.root || (!rec->success && (rec->failed_rank >= 0 || rec->agent_signal != 0));
  row.kind = rec->success ? "ok" : row.notable ? "failed" : "stopped by ddprun";
  return row;
}

// Which rows to print, in which order: all of them in node order, or past `max_rows` the root
// cause's row, then the other notable ones, then the first others (each group in node order).
std::vector<std::size_t> rows_shown(const std::vector<Row>& rows, std::size_t max_rows) {
  std::vector<std::size_t> order;
  if (rows.size() <= max_rows) {
    for (std::size_t i = 0; i < rows.size(); ++i) order.push_back(i);
    return order;
  }
  std::vector<bool> taken(rows.size(), false);
  const auto take = [&](auto&& wanted) {
    for (std::size_t i = 0; i < rows.size() && order.size() < max_rows; ++i) {
      if (!taken[i] && wanted(rows[i])) {
        taken[i] = true;
        order.push_back(i);
      }
    }
  };
  take([](const Row& r) { return r.root; });
  take([](const Row& r) { return r.notable; });
  take([](const Row&) { return true; });
  return order;
}

std::string plural(std::size_t n, const char* what) {
  return fmt::format("{} {}{}", n, what, n == 1 ? "" : "s");
}

// What a successful job's rows count. Only the rows that reported know their workers.
struct SuccessCount {
  int workers = 0;               // in the records that came
  std::size_t with_workers = 0;  // rows whose record came and counts workers
  std::size_t without = 0;       // rows whose record came with none (nodes) ...
  std::size_t missing = 0;       // ... and rows without a record
  std::size_t hosts = 0;         // per-task mode: the nodes the tasks ran on
};

// "4 workers on 2 nodes exited 0", per task "4 tasks on 2 nodes exited 0" (a task is one worker);
// rows that ran no worker or sent no record are counted apart, never as part of the workers' count:
// "2 workers on 2 nodes exited 0, 1 more node did not report".
std::string success_text(const SuccessCount& c, bool per_task) {
  const char* unit = per_task ? "task" : "node";
  std::string out = per_task ? plural(c.with_workers, "task") + " on " + plural(c.hosts, "node") + " exited 0"
                             : plural(static_cast<std::size_t>(c.workers), "worker") + " on " +
                                   plural(c.with_workers, "node") + " exited 0";
  const auto more = [unit](std::size_t n) { return fmt::format("{} more {}{}", n, unit, n == 1 ? "" : "s"); };
  if (c.without > 0) out += ", " + more(c.without) + " ran no worker";
  if (c.missing > 0) out += ", " + more(c.missing) + " did not report";
  return out;
}

std::string header(const RunResult& node0, const std::string& counted, bool colour) {
  const std::string head = fmt::format("ddprun: job summary (attempt {}): ", node0.attempt);
  if (node0.success) return head + fmt::format("{}, {}\n", paint("success", Style::green, colour), counted);
  std::string cause;
  if (const auto& f = node0.root_cause) {
    cause = f->rank >= 0 ? fmt::format(", root cause rank {} on {} ({})", f->rank, f->host, f->reason)
                         : fmt::format(", root cause: {}", f->reason);
  }
  // Ranks that exited after a checkpoint signal stopped on request: the words of every node's report.
  if (const int after = node0.root_cause ? node0.root_cause->after_signal : 0; after != 0) {
    return head + fmt::format("{}{}\n",
                              paint(fmt::format("stopped after {} with exit code {}", signal_name(after),
                                                node0.exit_code),
                                    Style::yellow, colour),
                              cause);
  }
  return head + fmt::format("{}, exit code {}{}\n",
                            paint(node0.root_cause && node0.root_cause->hang ? "HUNG" : "FAILED",
                                  Style::bold_red, colour),
                            job_code(node0), cause);
}

std::string footer(const std::vector<Row>& rows, const std::vector<bool>& shown, bool per_task) {
  std::map<std::string, int> hidden;
  bool stopped = false, missing = false;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (!shown[i]) ++hidden[rows[i].kind];
    stopped = stopped || (shown[i] && rows[i].stopped);
    missing = missing || (shown[i] && rows[i].missing);
  }
  std::string out;
  if (!hidden.empty()) {
    int n = 0;
    std::string kinds;
    for (const auto& [kind, count] : hidden) {
      n += count;
      kinds += fmt::format("{}{} {}", kinds.empty() ? "" : ", ", count, kind);
    }
    out += fmt::format("  ... {} more {}{}: {}\n", n, per_task ? "task" : "node", n == 1 ? "" : "s", kinds);
  }
  if (stopped) out += "  * stopped by ddprun during teardown\n";
  if (missing)
    out += "  no report: that agent was lost, hung, or still stopping when node 0 stopped waiting\n";
  return out;
}

}  // namespace

std::string format_job_summary(const RunResult& node0, const std::vector<PeerRecord>& peers, bool colour,
                               std::size_t max_rows, bool per_task) {
  std::vector<Row> rows;
  SuccessCount count;
  std::set<std::string> hosts;  // per-task mode: the nodes the tasks ran on
  for (const auto& p : peers) {
    rows.push_back(make_row(p, node0.root_cause, per_task));
    hosts.insert(p.host);
    const auto rec = p.record ? decode_node_record(*p.record) : std::nullopt;
    count.workers += rec ? rec->workers : 0;
    ++(!rec ? count.missing : rec->workers > 0 ? count.with_workers : count.without);
  }
  count.hosts = hosts.size();
  std::size_t hw = 4, rw = 5, resw = 6;
  for (const auto& r : rows) {
    hw = std::max(hw, r.host.size());
    rw = std::max(rw, r.ranks.size());
    resw = std::max(resw, r.result.size());
  }
  const auto order = rows_shown(rows, max_rows);
  std::vector<bool> shown(rows.size(), false);
  for (const std::size_t i : order) shown[i] = true;
  std::string out = header(node0, success_text(count, per_task), colour);
  const auto line = [&](const std::string& node, const std::string& host, const std::string& ranks,
                        const std::string& result, const std::string& duration) {
    return fmt::format("  {:>5}  {:<{}}  {:<{}}  {:<{}}  {:>9}\n", node, host, hw, ranks, rw, result, resw,
                       duration);
  };
  out += line("node", "host", "ranks", "result", "duration");
  for (const std::size_t i : order)
    out += line(rows[i].node, rows[i].host, rows[i].ranks, rows[i].result, rows[i].duration);
  return out + footer(rows, shown, per_task);
}

nlohmann::json job_summary_json(const RunResult& node0, const std::vector<PeerRecord>& peers) {
  nlohmann::json nodes = nlohmann::json::array();
  int reported = 0;
  for (const auto& p : peers) {
    const auto rec = p.record ? decode_node_record(*p.record) : std::nullopt;
    if (!rec) {
      nodes.push_back({{"node_rank", p.node_rank}, {"host", p.host}, {"reported", false}});
      continue;
    }
    ++reported;
    nlohmann::json n = nlohmann::json::parse(encode_node_record(*rec));
    n.erase("root_stack");  // a hang's stack is the failure report's root cause's, not a row's
    n.erase("root_stack_python");
    n["reported"] = true;
    nodes.push_back(std::move(n));
  }
  return {{"attempt", node0.attempt},
          {"success", node0.success},
          {"exit_code", node0.exit_code},
          {"root_cause", node0.root_cause ? failure_to_json(*node0.root_cause) : nlohmann::json(nullptr)},
          {"nodes_reported", reported},
          {"nodes", std::move(nodes)}};
}

}  // namespace ddprun::agent
