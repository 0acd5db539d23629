#include "requeue.hpp"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "agent/run_command.hpp"
#include "core/requeue.hpp"
#include "launcher/health_check.hpp"
#include "launcher/system.hpp"

namespace ddprun::launcher {

namespace {

// scontrol answers within its own MessageTimeout; this only bounds a slurmctld that never does.
constexpr std::chrono::milliseconds kScontrolTimeout{60000};

// `scontrol requeue TARGET`: nullopt when Slurm accepted it, else why not (scontrol's own words
// included). It keeps TERM and HUP ignored, as this process does: the requeue it asks for stops the
// batch script, and scontrol must live to say whether slurmctld accepted it.
std::optional<std::string> run_scontrol_requeue(const std::string& target) {
  agent::CommandRequest req{{"scontrol", "requeue", target}, kScontrolTimeout};
  req.output_cap = 2048;
  req.keep_tail = true;
  req.ignored_signals = {SIGTERM, SIGHUP};
  const agent::CommandResult r = agent::run_command(req);
  if (r.succeeded()) return std::nullopt;
  std::string why = r.not_started ? *r.not_started : "scontrol " + agent::describe_run(r, req.timeout);
  if (const std::string said = output_tail(r.output, 1); !said.empty()) why += ": " + said;
  return why;
}

// `scontrol show job -o TARGET`: what Slurm says of the job now (the first 64 KiB); empty when it
// cannot say (not on PATH, no answer, an error).
std::string show_job(const std::string& target) {
  agent::CommandRequest req{{"scontrol", "show", "job", "-o", target}, kScontrolTimeout};
  req.output_cap = 64 * 1024;
  req.stderr_too = false;
  agent::CommandResult r = agent::run_command(req);
  return r.succeeded() ? std::move(r.output) : std::string();
}

}  // namespace

int requeue_if_asked(const core::Resolved& r, int code) {
  if (r.requeue_on.empty() || r.requeue_on.count(code) == 0) return code;
  const auto target = core::requeue_target(snapshot_environ());
  // A listed code: was the job cancelled (scancel), or is it ending for a reason a requeue is for?
  const core::JobEnd end = target ? core::job_end_from_scontrol(show_job(*target)) : core::JobEnd::unknown;
  switch (core::requeue_verdict(code, r.requeue_on, r.job.requeue_count, r.max_requeues, end)) {
    case core::RequeueVerdict::not_listed:
      return code;
    case core::RequeueVerdict::cancelled:
      fmt::print(
          stderr,
          "ddprun: exit code {} is in --requeue-on, but job {} was cancelled (scancel): not requeued\n", code,
          target.value_or("?"));
      return code;
    case core::RequeueVerdict::budget_spent:
      fmt::print(stderr,
                 "ddprun: exit code {} is in --requeue-on, but the job has been requeued {} time{} "
                 "(SLURM_RESTART_COUNT; --max-requeues {}): not requeued\n",
                 code, r.job.requeue_count, r.job.requeue_count == 1 ? "" : "s", r.max_requeues);
      return code;
    case core::RequeueVerdict::requeue:
      break;
  }
  if (!target) {
    fmt::print(stderr, "ddprun: error: --requeue-on: no SLURM_JOB_ID to requeue; exit code {} kept\n", code);
    return code;
  }
  // Slurm stops this batch script once the requeue is accepted (TERM, then KILL): the line still gets out.
  std::signal(SIGTERM, SIG_IGN);
  std::signal(SIGHUP, SIG_IGN);
  if (const auto why = run_scontrol_requeue(*target)) {
    fmt::print(stderr, "ddprun: error: --requeue-on: scontrol requeue {} failed ({}); exit code {} kept\n",
               *target, *why, code);
    return code;
  }
  fmt::print(stderr,
             "ddprun: exit code {} is in --requeue-on: requeued job {} (requeue {} of --max-requeues {})\n",
             code, *target, r.job.requeue_count + 1, r.max_requeues);
  return code;
}

}  // namespace ddprun::launcher
