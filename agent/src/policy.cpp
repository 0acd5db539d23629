#include "agent/policy.hpp"

#include "agent/result.hpp"

#include <sys/wait.h>
#include <csignal>
#include <cstring>
#include <string>

#include <fmt/format.h>

namespace ddprun::agent {

// The one decoding: waitpid's status is turned into waitid's (code, status) first.
ExitStatus decode_wait_status(int wait_status) {
  if (WIFEXITED(wait_status)) return decode_child_status(CLD_EXITED, WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) return decode_child_status(CLD_KILLED, WTERMSIG(wait_status));
  return decode_child_status(0, 0);  // stopped or continued: not an end
}

ExitStatus decode_child_status(int code, int status) {
  ExitStatus s;
  if (code == CLD_EXITED) {
    s.exit_code = status;
  } else if (code == CLD_KILLED || code == CLD_DUMPED) {
    s.signal = status;
    s.exit_code = 128 + status;
  } else {
    s.exit_code = 1;  // stopped, continued: not an end we know
  }
  return s;
}

std::string describe_exit(const ExitStatus& s) {
  if (s.signal != 0) return "killed by " + signal_name(s.signal);
  if (s.exit_code == 0) return "exited normally";
  return "exited with code " + std::to_string(s.exit_code);
}

std::string exit_reason(const ExitStatus& s, bool after_teardown) {
  if (after_teardown && s.signal != 0) return describe_exit(s) + " (stopped by ddprun)";
  if (after_teardown && s.failed()) return describe_exit(s) + " during teardown";
  return describe_exit(s);
}

std::string short_exit(const ExitStatus& s) {
  if (s.signal != 0) return signal_name(s.signal) + " (" + std::to_string(s.exit_code) + ")";
  return std::to_string(s.exit_code);
}

bool same_failure(const Failure& a, const Failure& b) {
  return a.host == b.host && a.rank == b.rank && a.pid == b.pid && a.node_rank == b.node_rank;
}

std::optional<Failure> choose_root_cause(const std::optional<Failure>& store_root,
                                         const std::optional<Failure>& local,
                                         const std::optional<Failure>& observed) {
  if (store_root) return local && same_failure(*local, *store_root) ? local : store_root;
  return local ? local : observed;
}

int job_exit_code(const std::optional<Failure>& root_cause, int agent_signal,
                  const std::vector<ExitStatus>& exits) {
  if (root_cause) return root_cause->exit_code != 0 ? root_cause->exit_code : 1;
  if (agent_signal != 0) return 128 + agent_signal;
  for (const auto& e : exits) {
    // A failure without a recorded root cause should not happen; never report success for it.
    if (e.failed()) return e.exit_code;
  }
  return 0;
}

const std::vector<int>& forwarded_signals() {
  static const std::vector<int> sigs{SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
  return sigs;
}

bool is_stopping_signal(int sig) {
  return sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT;
}

bool is_checkpoint_signal(int sig) {
  return sig == SIGUSR1 || sig == SIGUSR2;
}

SignalTarget signal_target(int sig) {
  return is_checkpoint_signal(sig) ? SignalTarget::process : SignalTarget::group;
}

std::chrono::milliseconds teardown_delay(std::chrono::milliseconds grace_left, bool after_signal,
                                         std::chrono::milliseconds grace) {
  if (grace_left.count() > 0) return grace_left;
  return after_signal ? grace : std::chrono::milliseconds(0);
}

bool ended_on_late_signal(std::chrono::steady_clock::time_point ended,
                          std::chrono::steady_clock::time_point now, std::chrono::milliseconds settle) {
  return settle.count() > 0 && now >= ended && now - ended < settle;
}

SignalAction signal_action(int sig, int previous_agent_signal, bool teardown_started) {
  if (!is_stopping_signal(sig)) return SignalAction::forward;  // USR1/USR2: checkpoint requests
  if (previous_agent_signal != 0) {
    return sig == SIGINT && previous_agent_signal == SIGINT ? SignalAction::kill : SignalAction::ignore;
  }
  return teardown_started ? SignalAction::forward : SignalAction::teardown;
}

std::string_view to_string(SignalAction a) {
  return core::name_of(kSignalActionNames, a, "ignore");
}

StepHistory record_step(StepHistory h, std::optional<Step> step, int attempt) {
  const bool progress = step && (!h.best || *step > *h.best);
  if (attempt > 0) h.stalled = progress ? 0 : h.stalled + 1;
  if (progress) h.best = step;
  h.last = step;
  return h;
}

StepHistory record_attempt(StepHistory h, const std::optional<Failure>& root, int attempt) {
  if (root && root->lost) return h;
  return record_step(h, root ? root->step : std::nullopt, attempt);
}

AttemptDecision after_attempt(const RunResult& r, int attempt, int max_restarts,
                              const ProgressRule& progress) {
  if (r.success) return {false, 0};
  const int code = r.exit_code != 0 ? r.exit_code : 1;
  // A stop with no other root cause is final; one after another cause is after_stop's.
  const bool final = (r.stopped_by_signal && !r.root_cause) || r.spawn_failed ||
                     (r.root_cause && core::ends_job(*r.root_cause));
  if (final) return {false, code};
  if (progress.limit > 0 && progress.history.stalled >= progress.limit)
    return {false, kNoProgressExitCode, true};
  return {attempt < max_restarts, code};
}

bool ends_without_progress(const RunResult& r, int attempt, int limit, const StepHistory& before) {
  if (limit <= 0) return false;
  // The attempts loop's own record (record_attempt): a lost node's attempt is no restart without progress.
  const ProgressRule rule{limit, record_attempt(before, r.root_cause, attempt)};
  return after_attempt(r, attempt, 0, rule).no_progress;
}

std::string no_progress_line(const ProgressRule& progress) {
  const StepHistory& h = progress.history;
  const std::string last = h.last ? fmt::format("failed at step {}", *h.last) : "reported no step";
  const std::string best =
      h.best ? fmt::format("the best step is {}", *h.best) : "no attempt reported a step";
  return fmt::format(
      "no progress in {} restart{} in a row (--max-restarts-without-progress {}): the last attempt {}, {}; "
      "stopping with exit code {}",
      h.stalled, h.stalled == 1 ? "" : "s", progress.limit, last, best, kNoProgressExitCode);
}

bool stop_is_cause(const RunResult& r) {
  if (!r.stopped_by_signal) return false;
  if (!r.root_cause) return true;
  // An agent stopped by a signal, here or on another node (scancel signals them all): the same stop.
  const Failure& f = *r.root_cause;
  return f.rank < 0 && !f.lost && f.signal != 0;
}

RunResult standby_result(const std::optional<Failure>& root, int held_signal) {
  RunResult r;
  if (held_signal != 0) {
    r.stopped_by_signal = true;
    r.signal = held_signal;
  } else {
    r.root_cause = root;
  }
  r.exit_code = job_exit_code(r.root_cause, held_signal, {});
  r.success = r.exit_code == 0;
  return r;
}

AttemptDecision after_stop(AttemptDecision d, int stop) {
  if (stop == 0 || !d.restart) return d;
  return {false, 128 + stop};
}

}  // namespace ddprun::agent
