#pragma once
// --requeue-on CODES / --max-requeues N (docs/slurm.md, "Requeue on exit codes"): the batch script's
// ddprun asks Slurm to requeue the job when the job ends with one of these codes. Pure.
#include <array>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "core/enum_names.hpp"
#include "core/slurm_env.hpp"

namespace ddprun::core {

// "140,143,200-210": exit codes 0-255, single or as ranges LO-HI. Throws Error (exit 2) naming the
// bad part and the expected form.
std::set<int> parse_exit_codes(std::string_view text);
// The codes back as text, runs of three or more as LO-HI: "140,143,200-210".
std::string format_exit_codes(const std::set<int>& codes);

// How the job stands when its ddprun ends, as `scontrol show job -o` says (job_end_from_scontrol).
// Slurm 22.05 shows an ending job as JobState=COMPLETING whatever ends it; what ended it is in the
// rest: Reason=TimeLimit for a time limit, PreemptTime=<time> for a preemption (only where preemption is
// configured), neither for scancel (a user's or an administrator's cancel).
enum class JobEnd {
  unknown,     // scontrol did not answer, or said nothing we know
  running,     // RUNNING: only a signal came (scancel --signal, a preemption's grace time)
  cancelled,   // COMPLETING (or CANCELLED) without a time limit or a preemption: scancel
  time_limit,  // Reason=TimeLimit
  preempted,   // PreemptTime set
  other,       // another state or reason (a node failure, a deadline, ...)
};
inline constexpr std::array<EnumName<JobEnd>, 6> kJobEndNames{{{JobEnd::unknown, "unknown"},
                                                               {JobEnd::running, "running"},
                                                               {JobEnd::cancelled, "cancelled"},
                                                               {JobEnd::time_limit, "time limit"},
                                                               {JobEnd::preempted, "preempted"},
                                                               {JobEnd::other, "other"}}};
JobEnd job_end_from_scontrol(std::string_view show_job);
std::string_view to_string(JobEnd e);

enum class RequeueVerdict {
  requeue,       // the code is listed and requeues are left
  not_listed,    // the code is not in --requeue-on: exit with it
  budget_spent,  // listed, but SLURM_RESTART_COUNT already reached --max-requeues
  cancelled,     // listed, but the job was cancelled: a user's cancel never requeues
};

// `restart_count`: SLURM_RESTART_COUNT (0 when unset: the first run). `end`: what Slurm says of the job
// (asked only for a listed code); an unknown state leaves the decision to the code.
RequeueVerdict requeue_verdict(int code, const std::set<int>& codes, int restart_count, int max_requeues,
                               JobEnd end = JobEnd::unknown);

// The job `scontrol requeue` names: ARRAYJOB_TASK (SLURM_ARRAY_JOB_ID _ SLURM_ARRAY_TASK_ID) for an
// array task, else SLURM_JOB_ID (or SLURM_JOBID); nullopt outside a job.
std::optional<std::string> requeue_target(const EnvSnapshot& env);

}  // namespace ddprun::core
