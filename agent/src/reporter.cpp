#include "reporter.hpp"

#include <fmt/format.h>
#include <filesystem>
#include <fstream>
#include <utility>

#include "agent/events.hpp"
#include "agent/io.hpp"
#include "agent/supervisor.hpp"
#include "core/duration.hpp"
#include "report.hpp"

namespace ddprun::agent {

namespace {

nlohmann::json signal_json(int sig) {
  return sig != 0 ? nlohmann::json(signal_name(sig)) : nlohmann::json(nullptr);
}

nlohmann::json summary_json(const RunResult& r) {
  nlohmann::json workers = nlohmann::json::array();
  for (const auto& e : r.exits) {
    workers.push_back({{"rank", e.rank},
                       {"local_rank", e.local_rank},
                       {"host", e.host},
                       {"exit", e.status.exit_code},
                       {"signal", signal_json(e.status.signal)},
                       {"duration_s", core::seconds(e.duration)},
                       {"stopped_by_ddprun", e.stopped_by_ddprun}});
  }
  return {{"success", r.success}, {"exit_code", r.exit_code}, {"attempt", r.attempt}, {"workers", workers}};
}

}  // namespace

Reporter::Reporter(ReportSettings settings, Coordinator& coord)
    : s_(std::move(settings)), coord_(coord), json_(s_.events != nullptr && s_.events->json()) {}

void Reporter::set_node(const std::string& host, int node_rank) {
  host_ = host;
  node_rank_ = node_rank;
  if (s_.events != nullptr) s_.events->set_context(host_, node_rank_);
  const std::string stale = stale_error_file(error_file_spec(s_, node_rank_));
  std::error_code ec;  // a missing file is the usual case
  if (!stale.empty()) std::filesystem::remove(stale, ec);
}

void Reporter::event(const std::string& name, const nlohmann::json& fields) const {
  if (json_) s_.events->emit(name, fields);
}

void Reporter::warn(const std::string& message) const {
  if (json_) {
    event("warning", {{"message", message}});
  } else {
    write_all(2, "ddprun: " + paint("warning:", Style::yellow, use_colour(2)) + " " + message + "\n");
  }
}

void Reporter::worker_started(const Proc& p, const std::vector<std::string>& argv) const {
  event("worker_started",
        {{"rank", p.worker().rank}, {"local_rank", p.worker().local_rank}, {"pid", p.pid()}, {"argv", argv}});
}

void Reporter::worker_exited(const Proc& p) const {
  if (!json_) return;
  event("worker_exited", {{"rank", p.worker().rank},
                          {"local_rank", p.worker().local_rank},
                          {"pid", p.pid()},
                          {"exit_code", p.end.status.exit_code},
                          {"signal", signal_json(p.end.status.signal)},
                          {"reason", exit_reason(p.end.status, p.end.stopped_by_ddprun)},
                          {"duration_s", core::seconds(p.end.duration)},
                          {"stopped_by_ddprun", p.end.stopped_by_ddprun}});
}

void Reporter::signal_received(int sig, std::string_view action) const {
  event("signal_received", {{"signal", signal_name(sig)}, {"action", action}});
}

void Reporter::remote_abort(const Failure& root) const {
  event("remote_abort", {{"root_cause", failure_to_json(root)}});
}

void Reporter::hang_detected(const Failure& hang, std::chrono::milliseconds timeout) const {
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& s : hang.silent) ranks.push_back({{"rank", s.rank}, {"silent_s", s.silent_s}});
  if (json_) {
    event("hang_detected", {{"ranks", ranks}, {"timeout_s", core::seconds(timeout)}});
    return;
  }
  write_all(2, fmt::format("ddprun: {} {}; collecting stacks, then stopping the job (exit 124)\n",
                           paint("hang:", Style::bold_red, use_colour(2)), hang.reason));
}

void Reporter::teardown(std::string_view reason, int sig, const Failure& root) const {
  event("teardown", {{"reason", reason},
                     {"signal", signal_name(sig)},
                     {"grace_s", core::seconds(s_.term_timeout)},
                     {"root_cause", failure_to_json(root)}});
}

void Reporter::spawn_failed(const Failure& f, const std::string& message,
                            const std::vector<std::unique_ptr<Proc>>& started) const {
  if (json_) {
    event("spawn_failed", {{"rank", f.rank},
                           {"local_rank", f.local_rank},
                           {"error", message},
                           {"exit_code", f.exit_code},
                           {"command", s_.command},
                           {"module", s_.module}});
    for (const auto& p : started) worker_exited(*p);
    return;
  }
  std::string command;
  for (const auto& a : s_.command) command += (command.empty() ? "" : " ") + a;
  write_all(2, fmt::format("ddprun: {} cannot start rank {} (local rank {}) on {}: {} (command: {}{})\n",
                           paint("error:", Style::bold_red, use_colour(2)), f.rank, f.local_rank, f.host,
                           message, s_.module ? "-m " : "", command));
}

void Reporter::finished(const RunResult& run) const {
  const ReportRole role = report_role(s_.agents, s_.task_rank.value_or(node_rank_));
  // A node whose failure the store did not take in time does not hand its record over either: that
  // node 0 did not answer, and trying again would only add seconds to this node's exit.
  const bool published = role != ReportRole::single && run.not_told.empty() &&
                         coord_.publish_result(encode_node_record(node_record(run)));
  const ReportPlan plan = plan_report(role, s_.verbose, s_.quiet, json_, run, published);
  // Node 0 gathers first (it may wait for the other nodes): a hang's stack comes with the record of
  // the node that had it, and belongs in the report and the error file, --quiet or not.
  const bool hang_elsewhere = role == ReportRole::node0 && run.root_cause && run.root_cause->hang &&
                              run.root_cause->node_rank != run.node_rank;
  const std::vector<PeerRecord> peers =
      plan.gather || hang_elsewhere
          ? coord_.gather_results(gather_timeout(run.success, s_.term_timeout), lost_node(run.root_cause))
          : std::vector<PeerRecord>{};
  RunResult r = run;
  if (!r.root_stack) r.root_stack = root_stack_from(r, peers);
  if (json_) {
    if (!r.success) event("failure_report", report_to_json(r));
    event("summary", summary_json(r));
  } else {
    write_text(r, plan);
  }
  if (!r.success) write_error_json(r);
  if (plan.gather && !peers.empty()) job_summary(r, peers);
}

void Reporter::write_text(const RunResult& r, const ReportPlan& plan) const {
  const bool colour = use_colour(2);
  std::string text;
  if (plan.report) text += format_report(r, colour, plan.length);
  if (plan.node_table) text += format_summary(r, colour);
  if (plan.member_line) text += format_member_line(r, s_.task_rank, colour);
  if (!text.empty()) write_all(2, text);
}

void Reporter::job_summary(const RunResult& r, const std::vector<PeerRecord>& peers) const {
  if (json_) {
    event("job_summary", job_summary_json(r, peers));
  } else {
    write_all(2, format_job_summary(r, peers, use_colour(2), kJobSummaryRows, s_.task_rank.has_value()));
  }
}

void Reporter::write_error_json(const RunResult& r) const {
  const std::string path = error_file_path(error_file_spec(s_, node_rank_));
  if (path.empty()) return;
  std::error_code ec;
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  std::ofstream f(path, std::ios::trunc);
  // Worker stderr lines may not be UTF-8: replace them rather than throw.
  f << report_to_json(r).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  f.close();
  if (!f) warn("cannot write the error report to " + path);
}

void record_job_exit(const AgentOptions& opts, const AttemptContext& last, int node_rank, int job_exit_code) {
  const std::string path = error_file_path(error_file_spec(report_settings(opts, last, nullptr), node_rank));
  if (path.empty()) return;
  nlohmann::json report;
  {
    std::ifstream in(path);
    if (!in) return;  // this launch's runs wrote none here
    report = nlohmann::json::parse(in, nullptr, false);
  }
  if (!report.is_object()) return;
  report["job_exit_code"] = job_exit_code;
  // Whole or not at all: a reader never sees half a report.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    if (!out) return;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

}  // namespace ddprun::agent
