#pragma once
// The failure record: one failed worker (or a stopped or lost agent), as reported to the user and
// shared between nodes. One type and one codec for every layer, at one time precision (µs), so
// that every node compares the same timestamps when it names the root cause.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ddprun::core {

using FailureTime = std::chrono::time_point<std::chrono::system_clock, std::chrono::microseconds>;

// Now, at the record's precision.
FailureTime failure_now();

// A rank that made no progress (--hang-timeout), and for how long, as its node saw it.
struct SilentRank {
  int rank = 0;
  double silent_s = 0;
};

// The exit code of a hang on every node, as timeout(1) gives.
inline constexpr int kHangExitCode = 124;

struct Failure {
  std::string host;
  int node_rank = 0;
  int rank = -1;  // -1: not a worker (the agent itself was stopped, or a node was lost)
  int local_rank = -1;
  int exit_code = 0;  // the code ddprun exits with for it: exit status, or 128+signal
  int signal = 0;     // the signal that ended the worker; 0 if none
  long pid = 0;
  std::string reason;  // one line, e.g. "exited with code 3", "killed by SIGSEGV"
  FailureTime time{};
  std::vector<std::string> stderr_tail;  // last lines the worker wrote to stderr
  bool fatal = false;                    // a new attempt cannot help (the command cannot be started)
  // The checkpoint signal (SIGUSR1/SIGUSR2) the agent had forwarded within the grace before this
  // exit; 0 if none. Such an exit is a stop on request (e.g. 128+12 after saving a checkpoint).
  int after_signal = 0;
  // No rank failed: these ranks made no progress for --hang-timeout (exit_code kHangExitCode).
  bool hang = false;
  std::vector<SilentRank> silent;  // the hung ranks of the node that declared the hang
  // What a Python worker decorated with torch's @record wrote to TORCHELASTIC_ERROR_FILE: the
  // exception ("ValueError: ...") and its traceback, together at most kPythonErrorCap bytes; empty
  // when it wrote nothing usable.
  std::string error_message;
  std::string traceback;
  // A node was lost (its agent killed, its host gone, its heartbeat silent): host and node_rank
  // name it. In an elastic job (docs/elastic.md) the survivors go on without it.
  bool lost = false;
  // The highest training step the ranks of the failing node had written to their heartbeat files
  // when this failure was recorded (docs/agent.md, "Restarts without progress"); nullopt: none.
  std::optional<std::int64_t> step;
};

// Bound on error_message + traceback in one record (it travels through the store with the abort).
inline constexpr std::size_t kPythonErrorCap = 16 * 1024;

// Whether this root cause ends the job whatever --max-restarts says: a command that cannot start,
// an agent stopped by a signal (scancel, a time limit), where restarting would fight Slurm, or a
// worker that stopped after a checkpoint signal (the job is being preempted or requeued).
bool ends_job(const Failure& root);

// "SIGKILL", "SIGTERM", ...; "signal 42" for numbers without a name.
std::string signal_name(int sig);

// "2026-11-22T03:14:05.123Z"
std::string format_time(FailureTime t);

// Failure <-> JSON (reports, events, and what travels through the store). from_json throws
// core::Error (exit 1) on malformed input; fields added later (error_message, traceback, ...) may be
// missing or null, so records of older versions still decode.
nlohmann::json failure_to_json(const Failure& f);
Failure failure_from_json(const nlohmann::json& j);

// The wire form: compact JSON text, safe for any bytes in the strings.
std::string encode_failure(const Failure& f);
Failure decode_failure(std::string_view text);

}  // namespace ddprun::core
