#pragma once
// ddprun's own messages about one run of this node's workers: JSON events (--log-format json) or
// text on stderr, the failure report and summary table at the end, and the JSON error file.
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/coordinator.hpp"
#include "agent/log_paths.hpp"
#include "agent/result.hpp"
#include "job_summary.hpp"
#include "proc.hpp"
#include "run_settings.hpp"

namespace ddprun::agent {

class Reporter {
 public:
  // `coord` carries this node's end-of-run record to node 0, which prints the job-wide summary.
  Reporter(ReportSettings settings, Coordinator& coord);

  // This node, for the events and the error file's name. Called when a run starts: removes the
  // error file an earlier launch left where this run would write its own (stale_error_file).
  void set_node(const std::string& host, int node_rank);
  bool json() const { return json_; }

  void warn(const std::string& message) const;
  void worker_started(const Proc& p, const std::vector<std::string>& argv) const;
  void worker_exited(const Proc& p) const;
  void signal_received(int sig, std::string_view action) const;
  void remote_abort(const Failure& root) const;
  // This node declared a hang: a hang_detected event, or one line on stderr (stacks follow).
  void hang_detected(const Failure& hang, std::chrono::milliseconds timeout) const;
  void teardown(std::string_view reason, int sig, const Failure& root) const;
  // A command that could not be started: one error line, or a spawn_failed event and the end of
  // each worker already started (and killed).
  void spawn_failed(const Failure& f, const std::string& message,
                    const std::vector<std::unique_ptr<Proc>>& started) const;
  // The end of a run: failure report and summary table as text, or as events; the error file of a
  // failed run. --quiet hides the tables, never the failure: a brief report instead of the full one.
  // With several agents (job_summary.hpp): each publishes its record; node 0 gathers them and prints
  // the job-wide summary (or a job_summary event), the others print one line unless --verbose.
  void finished(const RunResult& r) const;

 private:
  void event(const std::string& name, const nlohmann::json& fields) const;
  void write_error_json(const RunResult& r) const;
  void write_text(const RunResult& r, const ReportPlan& plan) const;
  void job_summary(const RunResult& r, const std::vector<PeerRecord>& peers) const;

  ReportSettings s_;
  Coordinator& coord_;
  bool json_;  // events instead of ddprun's own text on stderr
  std::string host_;
  int node_rank_ = 0;
};

}  // namespace ddprun::agent
