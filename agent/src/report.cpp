#include "report.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <ctime>

#include "agent/error.hpp"
#include "agent/events.hpp"
#include "core/utf8.hpp"

namespace ddprun::agent {

namespace {

bool same_worker(const Failure& f, const WorkerExit& e) {
  return f.rank == e.rank && f.pid == e.pid;
}

std::string worker_label(int rank, int local_rank) {
  if (rank < 0) return "the ddprun agent";
  return fmt::format("rank {} (local rank {})", rank, local_rank);
}

std::string exit_text(int exit_code, int sig) {
  if (sig != 0) return fmt::format("{} (exit {})", signal_name(sig), exit_code);
  return fmt::format("{}", exit_code);
}

// A worker whose command never started (exec failed) has no pid.
std::string pid_text(long pid) {
  return pid > 0 ? std::to_string(pid) : std::string("none (the command never started)");
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start < text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::string duration_text(std::chrono::milliseconds d) {
  return fmt::format("{:.2f}s", static_cast<double>(d.count()) / 1000.0);
}

std::string stack_kind(const HungWorker& h) {
  return h.python ? "Python stack of every thread (faulthandler)" : "native stack (eu-stack)";
}

// A stack's lines, each indented under its heading.
std::string stack_lines(const std::string& stack) {
  std::string out;
  std::size_t start = 0;
  while (start < stack.size()) {
    const auto end = stack.find('\n', start);
    const auto len = end == std::string::npos ? std::string::npos : end - start;
    out += "    | " + escape_control(std::string_view(stack).substr(start, len)) + "\n";
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

// The stacks of this node's hung ranks, each line indented under its rank.
std::string hung_text(const std::vector<HungWorker>& hung) {
  if (hung.empty()) return "";
  std::string out = "Stacks of the silent ranks on this node:\n";
  for (const auto& h : hung) {
    out += fmt::format("  rank {} (local rank {}), pid {}, silent for {}, {}:\n", h.rank, h.local_rank, h.pid,
                       duration_text(h.silent), stack_kind(h));
    out += stack_lines(h.stack);
  }
  return out;
}

// The root cause's stack when it hung on another node: from that node's record.
std::string root_stack_text(const RunResult& r) {
  if (!r.root_stack || !r.root_cause) return "";
  return fmt::format("  stack of rank {} on {} (node {}), {}:\n", r.root_stack->rank, r.root_cause->host,
                     r.root_cause->node_rank, stack_kind(*r.root_stack)) +
         stack_lines(r.root_stack->stack);
}

// This node's root-cause stack wherever it came from: node 0's copy of another node's, or its own.
const HungWorker* root_stack_of(const RunResult& r) {
  if (r.root_stack) return &*r.root_stack;
  if (!r.root_cause || !r.root_cause->hang || r.root_cause->node_rank != r.node_rank) return nullptr;
  for (const auto& h : r.hung) {
    if (h.rank == r.root_cause->rank) return &h;
  }
  return nullptr;
}

// The exception a @record worker wrote to TORCHELASTIC_ERROR_FILE, and its traceback.
std::string python_error_text(const Failure& f) {
  std::string out;
  if (!f.error_message.empty()) {
    std::string_view first = f.error_message;
    first = first.substr(0, first.find('\n'));
    out += fmt::format("  error     : {}\n", escape_control(first));
    if (first.size() < f.error_message.size()) {
      for (const auto& l : lines_of(f.error_message.substr(first.size() + 1)))
        out += "              " + escape_control(l) + "\n";
    }
  }
  if (!f.traceback.empty()) {
    out += "  traceback (from TORCHELASTIC_ERROR_FILE):\n";
    for (const auto& l : lines_of(f.traceback)) out += "    | " + escape_control(l) + "\n";
  }
  return out;
}

}  // namespace

std::string escape_control(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\t' || (c >= 0x20 && c < 0x7F)) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    const std::size_t n = c >= 0x80 ? core::utf8_length(text, i) : 0;
    // U+0080-U+009F (C2 80-C2 9F) are the C1 controls: some terminals take U+009B as CSI.
    const bool c1 = n == 2 && c == 0xC2 && static_cast<unsigned char>(text[i + 1]) < 0xA0;
    if (n > 0 && !c1) {
      out.append(text.substr(i, n));
      i += n;
      continue;
    }
    for (std::size_t k = 0; k < std::max<std::size_t>(n, 1); ++k) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(text[i + k]));
    }
    i += std::max<std::size_t>(n, 1);
  }
  return out;
}

std::string format_report(const RunResult& r, bool colour, ReportLength length) {
  // Workers that exited after a checkpoint signal stopped on request: not a crash.
  const int after = r.root_cause ? r.root_cause->after_signal : 0;
  const bool hang = r.root_cause && r.root_cause->hang;
  const std::string what = after != 0 ? "stopped after " + signal_name(after)
                           : hang     ? std::string("job hung")
                                      : std::string("job failed");
  std::string out = paint(fmt::format("ddprun: {} with exit code {} (attempt {}, node {}, host {}{})", what,
                                      job_code(r), r.attempt, r.node_rank, r.host,
                                      r.no_progress ? "; no progress, --max-restarts-without-progress" : ""),
                          after != 0 ? Style::yellow : Style::bold_red, colour) +
                    "\n";
  if (stop_is_cause(r)) {
    out += fmt::format("ddprun: {} received by ddprun; workers were stopped\n", signal_name(r.signal));
  }
  if (!r.not_told.empty()) {
    out += fmt::format(
        "ddprun: the other nodes could not be told of this failure ({}); they stop on their own once they "
        "find this node gone\n",
        r.not_told);
  }
  if (const auto& f = r.root_cause) {
    out += after != 0 ? fmt::format("First exit after {}:\n", signal_name(after))
           : hang     ? paint("Root cause (hang):", Style::bold_red, colour) + "\n"
                      : paint("Root cause (first observed failure):", Style::bold_red, colour) + "\n";
    out += fmt::format("  time      : {}\n", format_time(f->time));
    out += fmt::format("  host      : {}\n", f->host);
    out += fmt::format("  node rank : {}\n", f->node_rank);
    if (f->rank >= 0) {
      out += fmt::format("  rank      : {} (local rank {})\n", f->rank, f->local_rank);
      out += fmt::format("  exit code : {}\n", exit_text(f->exit_code, f->signal));
      out += fmt::format("  pid       : {}\n", pid_text(f->pid));
    }
    out += fmt::format("  reason    : {}\n", f->reason);
    out += python_error_text(*f);
    if (!f->stderr_tail.empty() && !hang) {
      out += fmt::format("  last {} stderr lines:\n", f->stderr_tail.size());
      for (const auto& l : f->stderr_tail) out += "    | " + escape_control(l) + "\n";
    }
    out += root_stack_text(r);
  }
  out += hung_text(r.hung);  // even in a brief report: they are what a hang is about
  if (length == ReportLength::brief) return out;
  std::string others;
  for (const auto& e : r.exits) {
    if (!e.status.failed()) continue;
    if (r.root_cause && same_worker(*r.root_cause, e)) continue;
    others += fmt::format("  {} on {}: {}, pid {}, at {}\n", worker_label(e.rank, e.local_rank), e.host,
                          e.reason, pid_text(e.pid), format_time(e.end_time));
  }
  if (!others.empty()) out += "Other failures on this node:\n" + others;
  return out;
}

nlohmann::json report_to_json(const RunResult& r) {
  nlohmann::json j;
  j["version"] = 1;
  j["success"] = r.success;
  j["exit_code"] = r.exit_code;
  j["attempt"] = r.attempt;
  j["node_rank"] = r.node_rank;
  j["host"] = r.host;
  j["stopped_by_signal"] = r.stopped_by_signal;
  j["signal"] = r.signal != 0 ? nlohmann::json(signal_name(r.signal)) : nlohmann::json(nullptr);
  j["spawn_failed"] = r.spawn_failed;
  j["remote_abort"] = r.remote_abort;
  j["others_told"] = r.not_told.empty();
  j["not_told_reason"] = r.not_told.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.not_told);
  j["root_cause"] = r.root_cause ? failure_to_json(*r.root_cause) : nlohmann::json(nullptr);
  if (const HungWorker* h = root_stack_of(r)) {
    j["root_cause"]["stack"] = h->stack;
    j["root_cause"]["stack_kind"] = h->python ? "python" : "native";
  }
  nlohmann::json workers = nlohmann::json::array();
  for (const auto& e : r.exits) {
    nlohmann::json w;
    w["rank"] = e.rank;
    w["local_rank"] = e.local_rank;
    w["node_rank"] = e.node_rank;
    w["host"] = e.host;
    w["pid"] = e.pid;
    w["exit_code"] = e.status.exit_code;
    w["signal"] =
        e.status.signal != 0 ? nlohmann::json(signal_name(e.status.signal)) : nlohmann::json(nullptr);
    w["stopped_by_ddprun"] = e.stopped_by_ddprun;
    w["reason"] = e.reason;
    w["time"] = format_time(e.end_time);
    w["duration_s"] = static_cast<double>(e.duration.count()) / 1000.0;
    w["stderr_tail"] = e.stderr_tail;
    workers.push_back(std::move(w));
  }
  j["workers"] = std::move(workers);
  nlohmann::json hung = nlohmann::json::array();
  for (const auto& h : r.hung) {
    hung.push_back({{"rank", h.rank},
                    {"local_rank", h.local_rank},
                    {"pid", h.pid},
                    {"silent_s", static_cast<double>(h.silent.count()) / 1000.0},
                    {"stack_kind", h.python ? "python" : "native"},
                    {"stack", h.stack}});
  }
  j["hang"] = r.root_cause && r.root_cause->hang;
  j["hung"] = std::move(hung);
  return j;
}

namespace {

// A rank this node declared hung (the root cause): its row says so before how the teardown ended it.
std::string summary_exit(const RunResult& r, const WorkerExit& e) {
  std::string ex = short_exit(e.status);
  const auto& f = r.root_cause;
  if (f && f->hang && f->node_rank == r.node_rank &&
      std::any_of(f->silent.begin(), f->silent.end(), [&](const auto& s) { return s.rank == e.rank; })) {
    ex = "hung, " + ex;
  }
  if (e.stopped_by_ddprun) ex += " *";  // exit 0 on our TERM too: the JSON says the same
  return ex;
}

}  // namespace

std::string format_summary(const RunResult& r, bool colour) {
  std::size_t host_w = 4;
  std::size_t exit_w = 16;
  for (const auto& e : r.exits) {
    host_w = std::max(host_w, e.host.size());
    exit_w = std::max(exit_w, summary_exit(r, e).size());
  }
  std::string out = fmt::format(
      "ddprun: summary (attempt {}, node {}): {}, exit code {}\n", r.attempt, r.node_rank,
      r.success ? paint("success", Style::green, colour)
                : paint(r.root_cause && r.root_cause->hang ? "HUNG" : "FAILED", Style::bold_red, colour),
      job_code(r));
  out += fmt::format("  {:>5} {:>5}  {:<{}}  {:<{}} {:>9}\n", "rank", "local", "host", host_w, "exit", exit_w,
                     "duration");
  for (const auto& e : r.exits) {
    out += fmt::format("  {:>5} {:>5}  {:<{}}  {:<{}} {:>9}\n", e.rank, e.local_rank, e.host, host_w,
                       summary_exit(r, e), exit_w, duration_text(e.duration));
  }
  bool any_stopped = false;
  for (const auto& e : r.exits) any_stopped = any_stopped || e.stopped_by_ddprun;
  if (any_stopped) out += "  * stopped by ddprun during teardown\n";
  return out;
}

}  // namespace ddprun::agent
