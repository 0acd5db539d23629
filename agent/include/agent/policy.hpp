#pragma once
// Failure policy: pure decisions about exit statuses, root causes and the job's exit code.
#include <array>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/coordinator.hpp"
#include "core/enum_names.hpp"

namespace ddprun::agent {

// A worker's end as waitpid() reports it, decoded.
struct ExitStatus {
  int exit_code = 0;  // exit status, or 128+signal
  int signal = 0;     // 0 when the worker exited normally
  bool failed() const { return exit_code != 0; }
};

ExitStatus decode_wait_status(int wait_status);
// The same from waitid()'s siginfo: its si_code (CLD_EXITED, CLD_KILLED, CLD_DUMPED) and si_status.
ExitStatus decode_child_status(int code, int status);

using core::signal_name;

// "exited with code 3" / "killed by SIGSEGV" / "exited normally".
std::string describe_exit(const ExitStatus& s);

// describe_exit, and for a worker that ended during our teardown: "killed by SIGTERM (stopped by
// ddprun)" or "exited with code 1 during teardown".
std::string exit_reason(const ExitStatus& s, bool after_teardown);

// "3" or "SIGKILL (137)": the short form used in tables.
std::string short_exit(const ExitStatus& s);

// Whether two records are the same failure (the same worker or agent on the same node).
bool same_failure(const Failure& a, const Failure& b);

// The job's root cause, the one rule every node applies once (docs/agent.md, "Choosing the root
// cause"): the failure the store holds (the first one published in the job, by compare-and-set:
// what this node's own publication answered, or what another node's abort brought), as this
// node's own record when it is this node's failure (it has the stderr lines read since); without
// it, this node's first failure (a job of one node, or the other nodes could not be told); without
// that either, a cause only this node saw (its node 0 lost). A worker stopped by our own teardown
// is never passed in here.
std::optional<Failure> choose_root_cause(const std::optional<Failure>& store_root,
                                         const std::optional<Failure>& local,
                                         const std::optional<Failure>& observed);

// The code the agent exits with. 0 only when nothing failed, no signal stopped the job and every
// worker exited 0; otherwise the root cause's code; a signal received by the agent when no worker
// failed first gives 128+signal.
int job_exit_code(const std::optional<Failure>& root_cause, int agent_signal,
                  const std::vector<ExitStatus>& exits);

// Signals the agent forwards to its workers, and which of them end the job.
const std::vector<int>& forwarded_signals();
bool is_stopping_signal(int sig);    // TERM, INT, HUP, QUIT: forward, then grace and kill
bool is_checkpoint_signal(int sig);  // USR1, USR2: forward, the job goes on

// Who gets a signal meant for a worker. A checkpoint request goes to the worker process only: its
// children (DataLoader workers) have no handler for it and would die. Everything else (teardown,
// SIGKILL, a forwarded TERM) goes to the whole process group, so nothing the worker started is left.
enum class SignalTarget { process, group };
SignalTarget signal_target(int sig);

// How long teardown waits after a failure. A checkpoint signal forwarded within the grace
// (--term-timeout) gives the workers the rest of it to exit on their own: one rank exits 140 at
// once, another is still writing its checkpoint. `grace_left`: the rest of this node's grace, 0 when
// none runs. `after_signal`: the failure followed a checkpoint signal, maybe on another node; the
// same signal is then on its way here (srun passes it to every task), so the full grace applies.
std::chrono::milliseconds teardown_delay(std::chrono::milliseconds grace_left, bool after_signal,
                                         std::chrono::milliseconds grace);

// Inside a Slurm step, a signal for the step reaches every process of it, and the workers before their
// agent (slurmstepd signals the process tree from the leaves up): a worker can exit on a checkpoint
// signal before the agent has seen it. Its failure waits this long for that signal before it is
// decided and published (AgentOptions::signal_settle). Outside Slurm the agent forwards every signal
// itself, so nothing waits.
inline constexpr std::chrono::milliseconds kSlurmSignalSettle{100};

// A worker that ended at `ended` ended on the checkpoint signal the agent reads at `now`: it came
// within `settle` after the exit (its failure is still undecided then, see FailureTracker).
bool ended_on_late_signal(std::chrono::steady_clock::time_point ended,
                          std::chrono::steady_clock::time_point now, std::chrono::milliseconds settle);

// What a signal reaching the agent does while its workers run.
enum class SignalAction {
  forward,   // to every live worker group; the job goes on, or is already being torn down
  teardown,  // the first stopping signal: teardown starts with it
  kill,      // a second SIGINT (Ctrl-C twice): SIGKILL every group now
  ignore,    // a repeated TERM/HUP/QUIT: the workers keep their grace to checkpoint
};
inline constexpr std::array<core::EnumName<SignalAction>, 4> kSignalActionNames{
    {{SignalAction::forward, "forward"},
     {SignalAction::teardown, "teardown"},
     {SignalAction::kill, "kill"},
     {SignalAction::ignore, "ignore"}}};

// `previous_agent_signal` is the first stopping signal the agent got (0 if none); the caller records
// the first one. Slurm can deliver TERM more than once at a time limit, so only a second SIGINT
// means "now".
SignalAction signal_action(int sig, int previous_agent_signal, bool teardown_started);

// "forward", "teardown", "kill", "ignore": the signal_received event's action.
std::string_view to_string(SignalAction a);

}  // namespace ddprun::agent
