#pragma once
// The one way ddprun runs a short helper command (the health check, eu-stack, scontrol, squeue):
// started by spawn_process like a worker (its own process group, PR_SET_PDEATHSIG so it dies with
// the agent, default signal dispositions and an empty mask, stdin /dev/null, every other descriptor
// closed, only async-signal-safe calls between fork and exec), bounded by a deadline, its output
// captured up to a cap, its wait status decoded once (decode_wait_status). The run ends when the
// command exits (then only what is already in the pipe is read: a background child holding it open
// keeps no one waiting) or at the deadline; either way whatever is left in its process group is
// SIGKILLed. Blocks the caller: never call it on the supervisor's loop.
#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agent/policy.hpp"

namespace ddprun::agent {

struct CommandRequest {
  CommandRequest(std::vector<std::string> command, std::chrono::milliseconds limit)
      : argv(std::move(command)), timeout(limit) {}
  std::vector<std::string> argv;  // argv[0]: a path, or a name looked up in path_env
  std::chrono::milliseconds timeout;
  std::size_t output_cap = 64 * 1024;  // bytes of output kept
  bool keep_tail = false;  // past the cap keep the last bytes (a verdict at the end), else the first
  bool stderr_too = true;  // stderr into the output in the order written, else discarded
  std::optional<std::string> path_env;  // PATH for argv[0]; default: the agent's own
  std::vector<int> ignored_signals;     // the command starts with these ignored (spawn.hpp)
  bool stop_on_held_signal = false;     // end the run at once when held_stop_signal() (signals.hpp) says so
  // End the run when this says so (asked every 100 ms while the command runs, as a held signal is): the
  // caller's own reason to stop waiting (the health check: the job ended meanwhile).
  std::function<bool()> stop_when;
};

struct CommandResult {
  std::optional<std::string> not_started;  // why it never ran ("scontrol not found on PATH", ...)
  bool not_found = false;                  // ... because argv[0] is not on PATH
  bool timed_out = false;                  // its group was killed at the deadline
  bool stopped = false;                    // its group was killed for a held stopping signal
  bool stopped_when = false;               // its group was killed because stop_when said so
  ExitStatus status;                       // how it ended, when it started and ended in time
  std::string output;
  std::size_t dropped = 0;  // output bytes past the cap
  bool succeeded() const {
    return !not_started && !timed_out && !stopped && !stopped_when && status.exit_code == 0;
  }
};

CommandResult run_command(const CommandRequest& req);

// {"/bin/sh", "-c", command}.
std::vector<std::string> shell_command(const std::string& command);

// How it went, for a message: the reason it did not start, "did not finish within 2.5 s",
// "exited with code 3", "killed by SIGTERM", "exited normally".
std::string describe_run(const CommandResult& r, std::chrono::milliseconds timeout);

// Adds `more` to `text` (what a run captured) within `cap` bytes: the first ones, or with `tail`
// the last ones; `dropped` counts the rest. Pure.
void keep_output(std::string& text, std::size_t& dropped, std::string_view more, std::size_t cap, bool tail);

}  // namespace ddprun::agent
