// Each agent's end-of-run record, its codec, the member's one line and who prints what. Node 0's
// table is in job_table.cpp.
#include <fmt/format.h>
#include <algorithm>

#include "agent/events.hpp"
#include "core/json.hpp"
#include "core/utf8.hpp"
#include "job_summary.hpp"

namespace ddprun::agent {

namespace {

std::string rank_range(int lo, int hi) {
  return lo == hi ? fmt::format("rank {}", lo) : fmt::format("ranks {}-{}", lo, hi);
}

// The first local worker that failed by itself; the root cause when it is one of them.
const WorkerExit* own_failure(const RunResult& r) {
  const WorkerExit* first = nullptr;
  for (const auto& e : r.exits) {
    if (!e.status.failed() || e.stopped_by_ddprun) continue;
    if (r.root_cause && r.root_cause->rank == e.rank && r.root_cause->pid == e.pid) return &e;
    if (first == nullptr || e.end_time < first->end_time) first = &e;
  }
  return first;
}

}  // namespace

NodeRecord node_record(const RunResult& r) {
  NodeRecord n;
  n.node_rank = r.node_rank;
  n.host = r.host;
  n.workers = static_cast<int>(r.exits.size());
  n.success = r.success;
  n.exit_code = r.exit_code;
  n.spawn_failed = r.spawn_failed;
  n.agent_signal = stop_is_cause(r) ? r.signal : 0;  // a TERM during another cause's teardown: "stopped *"
  for (const auto& e : r.exits) {
    n.first_rank = n.first_rank < 0 ? e.rank : std::min(n.first_rank, e.rank);
    n.last_rank = std::max(n.last_rank, e.rank);
    if (e.stopped_by_ddprun) ++n.stopped;
    n.duration_s = std::max(n.duration_s, static_cast<double>(e.duration.count()) / 1000.0);
  }
  if (const WorkerExit* f = own_failure(r)) {
    n.failed_rank = f->rank;
    n.failed_exit = f->status.exit_code;
    n.failed_signal = f->status.signal;
  } else if (r.spawn_failed && r.root_cause) {
    n.failed_rank = r.root_cause->rank;
    n.failed_exit = r.root_cause->exit_code;
  } else if (const auto& root = r.root_cause; root && root->hang && root->node_rank == r.node_rank) {
    // The job hung, and this node's silent rank is the root cause: its row says so, with its stack.
    for (const auto& e : r.exits) {
      if (e.rank != root->rank) continue;
      n.hung = true;
      n.failed_rank = root->rank;
      n.failed_exit = root->exit_code;
    }
    for (const auto& h : r.hung) {
      if (h.rank != root->rank) continue;
      n.root_stack = h.stack;
      n.root_stack_python = h.python;
    }
  }
  return n;
}

std::optional<HungWorker> root_stack_from(const RunResult& node0, const std::vector<PeerRecord>& peers) {
  const auto& root = node0.root_cause;
  if (!root || !root->hang) return std::nullopt;
  for (const auto& h : node0.hung) {
    if (h.rank == root->rank && root->node_rank == node0.node_rank) return std::nullopt;  // printed as ours
  }
  for (const auto& p : peers) {
    const auto rec = p.record ? decode_node_record(*p.record) : std::nullopt;
    if (!rec || !rec->hung || rec->node_rank != root->node_rank || rec->failed_rank != root->rank) continue;
    if (rec->root_stack.empty()) return std::nullopt;
    HungWorker h;
    h.rank = root->rank;
    h.local_rank = root->local_rank;
    h.pid = root->pid;
    for (const auto& s : root->silent) {
      if (s.rank == root->rank) h.silent = std::chrono::milliseconds(static_cast<long>(s.silent_s * 1000.0));
    }
    h.python = rec->root_stack_python;
    h.stack = rec->root_stack;
    return h;
  }
  return std::nullopt;
}

std::string encode_node_record(const NodeRecord& n) {
  nlohmann::json j = {{"node_rank", n.node_rank},
                      {"host", n.host},
                      {"first_rank", n.first_rank},
                      {"last_rank", n.last_rank},
                      {"workers", n.workers},
                      {"success", n.success},
                      {"exit_code", n.exit_code},
                      {"failed_rank", n.failed_rank},
                      {"failed_exit", n.failed_exit},
                      {"failed_signal", n.failed_signal},
                      {"spawn_failed", n.spawn_failed},
                      {"stopped", n.stopped},
                      {"agent_signal", n.agent_signal},
                      {"duration_s", n.duration_s},
                      {"hung", n.hung},
                      {"root_stack", n.root_stack},
                      {"root_stack_python", n.root_stack_python}};
  // A stack's bytes that are not UTF-8 (a path's, say) as hex too, so node 0 shows them as \xNN.
  if (!core::valid_utf8(n.root_stack)) j["root_stack_hex"] = core::to_hex(n.root_stack);
  return core::dump_json(j);
}

std::optional<NodeRecord> decode_node_record(std::string_view text) {
  try {
    const auto j = nlohmann::json::parse(text);
    NodeRecord n;
    n.node_rank = core::json_int<int>(j, "node_rank");
    n.host = j.at("host").get<std::string>();
    n.first_rank = core::json_int<int>(j, "first_rank");
    n.last_rank = core::json_int<int>(j, "last_rank");
    n.workers = core::json_int<int>(j, "workers");
    n.success = j.at("success").get<bool>();
    n.exit_code = core::json_int<int>(j, "exit_code");
    n.failed_rank = core::json_int<int>(j, "failed_rank");
    n.failed_exit = core::json_int<int>(j, "failed_exit");
    n.failed_signal = core::json_int<int>(j, "failed_signal");
    n.spawn_failed = j.at("spawn_failed").get<bool>();
    n.stopped = core::json_int<int>(j, "stopped");
    n.agent_signal = core::json_int<int>(j, "agent_signal");
    n.duration_s = j.at("duration_s").get<double>();
    // Added later: a record without them (an older ddprun on that node) still reads.
    n.hung = j.value("hung", false);
    n.root_stack = j.value("root_stack", std::string());
    n.root_stack_python = j.value("root_stack_python", false);
    if (const auto hex = j.find("root_stack_hex");
        hex != j.end() && !core::from_hex(hex->get<std::string>(), n.root_stack))
      return std::nullopt;
    return n;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

ReportRole report_role(int agents, int agent_id) {
  if (agents <= 1) return ReportRole::single;
  return agent_id == 0 ? ReportRole::node0 : ReportRole::member;
}

ReportPlan plan_report(ReportRole role, bool verbose, bool quiet, bool json, const RunResult& r,
                       bool published) {
  ReportPlan p;
  // A command that could not start has had its one error line already.
  p.report = !r.success && !r.spawn_failed;
  p.length = quiet ? ReportLength::brief : ReportLength::full;
  p.node_table = !quiet && !r.exits.empty() && !r.spawn_failed;
  if (role == ReportRole::node0) {
    p.node_table = p.node_table && verbose;
    p.gather = json || !quiet;
  } else if (role == ReportRole::member && !verbose && published) {
    // A hang keeps this node's stacks on this node's stderr: nobody else has them.
    p.report = !r.hung.empty();
    p.length = ReportLength::brief;
    p.node_table = false;
    p.member_line = !r.spawn_failed && !(quiet && r.success);
  }
  return p;
}

std::optional<int> lost_node(const std::optional<Failure>& root) {
  if (!root || root->rank >= 0 || root->signal != 0) return std::nullopt;
  return root->node_rank;
}

std::chrono::milliseconds gather_timeout(bool success, std::chrono::milliseconds term_timeout) {
  if (success) return std::chrono::milliseconds{5000};
  return term_timeout + std::chrono::milliseconds{3000};
}

namespace {

// The first line of a Python exception, short enough for a one-line message.
std::string one_line(const std::string& message) {
  constexpr std::size_t kMax = 160;
  std::string s = message.substr(0, message.find('\n'));
  if (s.size() <= kMax) return s;
  std::size_t n = kMax;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;  // whole UTF-8 sequences
  return s.substr(0, n) + "...";
}

}  // namespace

std::string format_member_line(const RunResult& r, std::optional<int> task_rank, bool colour) {
  const std::string who = task_rank ? fmt::format("rank {} on node {} ({})", *task_rank, r.node_rank, r.host)
                                    : fmt::format("node {} ({})", r.node_rank, r.host);
  if (r.success) {
    std::string ranks = "no workers";
    if (!r.exits.empty()) {
      const auto [lo, hi] = std::minmax_element(r.exits.begin(), r.exits.end(),
                                                [](const auto& a, const auto& b) { return a.rank < b.rank; });
      ranks = rank_range(lo->rank, hi->rank) + " exited 0";
    }
    return fmt::format("ddprun: {}: {}, {}; job summary on node 0\n", who,
                       paint("success", Style::green, colour), ranks);
  }
  std::string cause = "no root cause known";
  if (const auto& f = r.root_cause) {
    cause = f->rank >= 0 ? fmt::format("root cause rank {} on {}", f->rank, f->host)
                         : fmt::format("root cause: {}", f->reason);
    if (!f->error_message.empty()) cause += fmt::format(" ({})", escape_control(one_line(f->error_message)));
  }
  // Ranks that exited after a checkpoint signal stopped on request: the same words as the report.
  const int after = r.root_cause ? r.root_cause->after_signal : 0;
  if (after != 0) {
    return fmt::format(
        "ddprun: {}: {}, {}; full report on node 0\n", who,
        paint(fmt::format("stopped after {} with exit code {}", signal_name(after), r.exit_code),
              Style::yellow, colour),
        cause);
  }
  const bool hang = r.root_cause && r.root_cause->hang;
  return fmt::format("ddprun: {}: {}, exit {}, {}; full report on node 0\n", who,
                     paint(hang ? "hung" : "failed", Style::bold_red, colour), job_code(r), cause);
}

}  // namespace ddprun::agent
