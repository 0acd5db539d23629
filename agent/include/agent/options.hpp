#pragma once
// The agent's options: what the command line and the resolution fix for the whole launch. What changes
// from one attempt to the next is the attempt context (attempt_context.hpp).
#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/command.hpp"
#include "core/defaults.hpp"

namespace ddprun::agent {

struct AgentOptions {
  std::vector<std::string> command;  // COMMAND [ARGS...], or MODULE [ARGS...] with module
  bool no_python = false;
  bool module = false;
  std::string python = "python3";
  core::LocalRankArg local_rank_arg = core::LocalRankArg::none;        // --local-rank-arg
  std::chrono::milliseconds term_timeout = core::kDefaultTermTimeout;  // grace between SIGTERM and SIGKILL
  // How long a worker's failure waits for a checkpoint signal still on its way to the agent before it
  // is decided (policy.hpp, kSlurmSignalSettle inside a Slurm step); 0: decided at once.
  std::chrono::milliseconds signal_settle{0};
  // A rank without output or heartbeat for this long is hung (hang_watch.hpp); null: never.
  std::optional<std::chrono::milliseconds> hang_timeout;
  // --max-restarts-without-progress (0: off): the workers get heartbeat files for their steps, also
  // without hang_timeout. The rule itself is the attempts loop's (result.hpp, after_attempt).
  int max_restarts_without_progress = 0;
  std::optional<std::string> prefix_template;  // default "[{rank}]: "; set = prefix on
  bool no_prefix = false;
  bool tee = false;                                 // accepted for torchrun users; needs log_dir
  std::optional<std::string> log_dir;               // per-rank files, layout in log_paths.hpp
  std::optional<std::set<int>> local_ranks_filter;  // local ranks shown on the console
  // A line a worker redraws in place (a progress bar) goes to a file or pipe as a line at most this
  // often (output_relay.hpp); a terminal gets it drawn in place ten times a second.
  std::chrono::milliseconds redraw_interval{5000};
  std::optional<std::string> error_file;  // JSON report of a failed run; may hold {node_rank}
  int requeue = 0;                        // SLURM_RESTART_COUNT: Slurm requeues of the job
  std::optional<int> task_rank;           // per-task mode: the rank of this agent's one worker
  bool quiet = false;    // no summary table; a failure still gets the brief report (root cause)
  bool verbose = false;  // several agents: each prints its own report and table, not one line
};

// Checks options that do not depend on the workers (prefix template, tee without log dir, empty
// command). Throws Error with a one-line message. run_workers calls it too; the CLI may call it
// early to fail before the rendezvous.
void validate_options(const AgentOptions& opts);

// How the workers' command is built from the options (core::build_argv, core::worker_argv).
core::CommandSpec command_spec(const AgentOptions& opts);

}  // namespace ddprun::agent
