#pragma once
// --health-check CMD (docs/agent.md, "Health check"): a shell command every agent runs before it joins
// a rendezvous round; a node whose check fails or hangs does not take part. The verdict is pure
// (judge_health_check); running the command is thin (run_health_check).
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.hpp"

namespace ddprun::launcher {

// The exit code of a job whose node failed its health check: neither a worker's code nor ddprun's
// own input (2) or rendezvous (1) errors, so a script can tell a bad node apart.
inline constexpr int kHealthCheckExitCode = 125;

// How much of the check's output is kept (its end), and how many of its last lines are reported.
inline constexpr std::size_t kHealthCheckOutputCap = 4096;
inline constexpr std::size_t kHealthCheckTailLines = 5;

// What the command did: its exit status (128+signal for a signal), or that it ran past the timeout
// (then killed with its process group); its combined stdout/stderr, at most the last cap bytes.
struct HealthCheckRun {
  bool timed_out = false;
  int status = 0;
  std::string output;
  int stopped = 0;  // a stopping signal reached the agent meanwhile: the check was killed, no verdict
  bool interrupted = false;  // the caller's `stop` said so first: killed with its group, no verdict
};

// nullopt: the node is healthy. Else the one line naming the node, the check's code or its timeout,
// and the last lines of its output (control characters and invalid bytes escaped; lines joined by " | ").
std::optional<std::string> judge_health_check(const HealthCheckRun& run, const std::string& host,
                                              std::optional<int> node_rank, double timeout_s);

// The last `lines` non-empty lines of `output`, each made printable (a non-printable byte as \xNN).
std::string output_tail(std::string_view output, std::size_t lines);

// Runs `/bin/sh -c command` through agent::run_command: this process's environment, a process group of
// its own, stdin /dev/null, stdout and stderr captured (the last kHealthCheckOutputCap bytes). At the
// timeout the whole group is killed (SIGKILL), as it is once `stop` (asked every 100 ms) returns true
// (`interrupted`). The stopping signals are held meanwhile (agent::hold_stop_signals): one that comes
// kills the group at once and is returned in `stopped`, still held, so that nothing the check started
// outlives the agent; otherwise the hold is released as it was. Throws core::Error when the command cannot
// be started.
HealthCheckRun run_health_check(const std::string& command, double timeout_s,
                                const std::function<bool()>& stop = {});

// On node rank 0 of an elastic job's first round under Slurm, where the step says which nodes should
// come: nullopt when all `nagents` did; else one line naming the nodes that did not join (by their own
// node rank, SLURM_NODEID, and host where known), for instance after a failed health check.
std::optional<std::string> left_out_line(int nagents, const std::vector<int>& joined_ranks,
                                         const std::vector<std::string>& hosts);

// The check of this node under `o` (--health-check, its timeout). `stop` (asked every 100 ms while the
// check runs: the job ended meanwhile) ends it with neither a failure nor a stop.
struct NodeHealth {
  std::optional<std::string> failure;  // judge_health_check's line; nullopt: healthy, no check, or `stop`
  int stopped = 0;                     // a stopping signal ended the check: the agent exits 128 + it
};
NodeHealth check_node_health(const core::Options& o, const core::Resolved& r,
                             const std::function<bool()>& stop = {});

}  // namespace ddprun::launcher
