#pragma once
// Where a run's files go (pure): the per-rank logs under --log-dir and the JSON error file.
//
//   DIR/attempt_<n>/rank_<r>/stdout.log              first run of the job (no requeue)
//   DIR/requeue_<q>/attempt_<n>/rank_<r>/stdout.log  the q-th Slurm requeue (SLURM_RESTART_COUNT=q)
//   <attempt dir>/error_node_<k>.json                 a failed run's report, without --error-file
//
// <n> counts the restarts of this launch (--max-restarts), so a requeue never writes into an
// earlier run's directories.
#include <optional>
#include <string>

namespace ddprun::agent {

std::string attempt_dir(const std::string& log_dir, int requeue, int attempt);
std::string rank_log_dir(const std::string& log_dir, int requeue, int attempt, int rank);

// The files a run hands worker `rank`: TORCHELASTIC_ERROR_FILE and (--hang-timeout)
// DDPRUN_HEARTBEAT_FILE. Under --log-dir beside the rank's logs (<rank dir>/error.json,
// <rank dir>/heartbeat); else in `private_dir`, the run's private directory for them
// (<private_dir>/rank_<r>.json, <private_dir>/rank_<r>/heartbeat).
std::string worker_error_file(const std::optional<std::string>& log_dir, int requeue, int attempt, int rank,
                              const std::string& private_dir);
std::string worker_heartbeat_file(const std::optional<std::string>& log_dir, int requeue, int attempt,
                                  int rank, const std::string& private_dir);

// What decides the JSON error file's path for one agent.
struct ErrorFileSpec {
  std::optional<std::string> error_file;  // --error-file; may hold {node_rank}
  std::optional<std::string> log_dir;     // --log-dir: the default place
  int requeue = 0;
  int attempt = 0;
  int node_rank = 0;
  int agents = 1;                // ddprun agents of the job that write a report (nodes, or tasks)
  std::optional<int> task_rank;  // per-task mode: this agent's one worker (several agents per node)
};

// "" when the run writes no error file. --error-file with several agents: {node_rank} is replaced;
// a path without it gets ".node<k>" before its extension (err.json -> err.node1.json), so no
// agent overwrites another's report. Per-task mode adds ".rank<r>" (tasks share a node rank).
// Without --error-file: error_node_<k>.json (per-task mode: error_rank_<r>.json) in the attempt dir.
std::string error_file_path(const ErrorFileSpec& s);

// The error file to delete when a run starts, so that no report of an earlier launch lies beside
// this run's logs: the attempt dir's own file, or --error-file at the first attempt of a launch
// (a later attempt keeps the previous attempt's report until it has its own). "" for none.
std::string stale_error_file(const ErrorFileSpec& s);

}  // namespace ddprun::agent
