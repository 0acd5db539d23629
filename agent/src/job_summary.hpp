#pragma once
// The job-wide view of one run (pure). Each agent of a multi-node job publishes a compact record of
// how its run ended; node 0 gathers them through the store and prints one summary for
// the whole job, while the other nodes print one line each. Also: who prints what at the end of a run.
#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/coordinator.hpp"
#include "agent/result.hpp"
#include "report.hpp"

namespace ddprun::agent {

// How one agent's run ended: a few fields, no stderr, so node 0 holds O(nodes) small records.
struct NodeRecord {
  int node_rank = 0;
  std::string host;
  int first_rank = -1;  // this agent's ranks; -1 when none started
  int last_rank = -1;
  int workers = 0;
  bool success = false;
  int exit_code = 0;      // the job's code as this agent ended
  int failed_rank = -1;   // the first local worker that failed by itself (not stopped by ddprun)
  int failed_exit = 0;    // its code (128+signal for a signal) ...
  int failed_signal = 0;  // ... and signal
  bool spawn_failed = false;
  int stopped = 0;          // workers stopped by ddprun's teardown
  int agent_signal = 0;     // a stopping signal this agent received (scancel, time limit)
  double duration_s = 0.0;  // the longest worker's
  // The job's root cause is a hang of this node's rank failed_rank: its stack (capped, as the
  // record of a @record traceback is) goes to node 0's report with this record.
  bool hung = false;
  std::string root_stack;
  bool root_stack_python = false;  // faulthandler's dump, else eu-stack's
};

NodeRecord node_record(const RunResult& r);
std::string encode_node_record(const NodeRecord& n);                  // compact JSON
std::optional<NodeRecord> decode_node_record(std::string_view text);  // nullopt when malformed

// Who prints what at the end of a run: a job of one agent, node rank 0 of several, or another node.
enum class ReportRole { single, node0, member };
ReportRole report_role(int agents, int agent_id);

struct ReportPlan {
  bool report = false;  // the failure report (text)
  ReportLength length = ReportLength::full;
  bool node_table = false;   // this node's per-rank summary table (text)
  bool member_line = false;  // the one line a node other than 0 prints instead (text)
  bool gather = false;       // node 0 gathers every record: job-wide table or job_summary event
};

// The rule, table-tested. A member whose record did not reach node 0 (`published` false) reports
// in full itself, as does every node with `verbose`. `quiet` hides the tables, never a failure. In
// json mode only `gather` matters: the other events are written on every node.
ReportPlan plan_report(ReportRole role, bool verbose, bool quiet, bool json, const RunResult& r,
                       bool published);

// The node whose lost agent is the root cause (no worker, no signal: its connection dropped or its
// heartbeats stopped); node 0 does not wait for its record.
std::optional<int> lost_node(const std::optional<Failure>& root);

// How long node 0 waits for the other nodes' records: a successful run's nodes are done, a failed
// run's may still be in their teardown (grace, then up to 2 s reading output).
std::chrono::milliseconds gather_timeout(bool success, std::chrono::milliseconds term_timeout);

// The root cause's stack after a hang on another node, from that node's record (nullopt when the
// root cause is no hang, is this node's own, or its record did not bring the stack).
std::optional<HungWorker> root_stack_from(const RunResult& node0, const std::vector<PeerRecord>& peers);

inline constexpr std::size_t kJobSummaryRows = 16;

// Node 0's job-wide summary: a header with the job's outcome and root cause, then one row per
// node (node, host, ranks, result, longest duration). Past `max_rows` nodes, the root cause's row
// comes first, then the other rows that explain the outcome (failures, signals, missing reports),
// then the first others, and one line counts the rest. `per_task`: the rows are tasks (per-task
// mode), and the header counts tasks and nodes apart.
std::string format_job_summary(const RunResult& node0, const std::vector<PeerRecord>& peers, bool colour,
                               std::size_t max_rows = kJobSummaryRows, bool per_task = false);
nlohmann::json job_summary_json(const RunResult& node0, const std::vector<PeerRecord>& peers);

// The one line of a node other than 0:
//   ddprun: node 1 (host-b): failed, exit 7, root cause rank 3 on host-c; full report on node 0
//   ddprun: node 1 (host-b): success, ranks 2-3 exited 0; job summary on node 0
// Per-task mode names the agent's rank too ("rank 5 on node 1 (host-b)").
std::string format_member_line(const RunResult& r, std::optional<int> task_rank, bool colour);

}  // namespace ddprun::agent
