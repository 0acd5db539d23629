#pragma once
// Entry point: run this node's workers once and supervise them until they all ended.
#include <chrono>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/coordinator.hpp"
#include "agent/result.hpp"
#include "core/command.hpp"
#include "core/defaults.hpp"
#include "core/plan.hpp"

namespace ddprun::agent {

class Events;

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
  int attempt = 0;                        // restarts of this launch (--max-restarts)
  // The steps of this launch's attempts before this one: with max_restarts_without_progress, the report
  // of a run that ends the job for want of progress says the job's code (RunResult::no_progress).
  StepHistory steps;
  int elastic_events = 0;        // membership changes of an elastic job so far (`ddprun top`'s header)
  int plan_nodes = 0;            // active nodes of this attempt's plan (`ddprun top`); 0: `agents`
  int requeue = 0;               // SLURM_RESTART_COUNT: Slurm requeues of the job
  int agents = 1;                // ddprun agents in the job (nodes; tasks in per-task mode)
  std::optional<int> task_rank;  // per-task mode: the rank of this agent's one worker
  bool quiet = false;            // no summary table; a failure still gets the brief report (root cause)
  bool verbose = false;          // several agents: each prints its own report and table, not one line
  // Called once every local worker started, before any of their output is relayed (the startup
  // table): a command that cannot start is then one error line with nothing before it.
  std::function<void()> on_started;
  // Where ddprun's own messages go as JSON events (--log-format json); null or text mode: the usual
  // text on stderr. In json mode the supervisor writes no text of its own, whatever `quiet` says.
  Events* events = nullptr;
};

// Checks options that do not depend on the workers (prefix template, tee without log dir, empty
// command). Throws Error with a one-line message. run_workers calls it too; the CLI may call it
// early to fail before the rendezvous.
void validate_options(const AgentOptions& opts);

// How the workers' command is built from the options (core::build_argv, core::worker_argv).
core::CommandSpec command_spec(const AgentOptions& opts);

// Spawns `local` (this node's workers), relays their output, supervises them, tears down on the
// first failure, a remote abort or a stopping signal, and returns how it ended. Prints the failure
// report and the summary table on stderr (quiet: only the brief report of a failure), or emits them
// as events in json mode.
// Can be called again for a restart; it must be called from a thread that lives as long as the
// workers (their death signal follows it).
// Throws Error only for invalid options, and passes on what the coordinator throws when the run
// starts (installing the abort handler); a command that cannot start gives spawn_failed.
RunResult run_workers(const std::vector<core::Worker>& local, int world_size, const AgentOptions& opts,
                      Coordinator& coordinator);

// When the launch ends: the job's own exit code (`job_exit_code`) added to the error file this node's
// last run wrote, if any, which holds that run's code (3, say, where the job exits 123 after restarts
// without progress). `opts` as for the last run, `node_rank` this node's in it.
void record_job_exit(const AgentOptions& opts, int node_rank, int job_exit_code);

}  // namespace ddprun::agent
