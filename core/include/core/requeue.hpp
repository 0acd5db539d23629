#pragma once
// --requeue-on CODES / --max-requeues N (docs/slurm.md, "Requeue on exit codes"): the batch script's
// ddprun asks Slurm to requeue the job when the job ends with one of these codes. Pure.
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "core/slurm_env.hpp"

namespace ddprun::core {

// "140,143,200-210": exit codes 0-255, single or as ranges LO-HI. Throws Error (exit 2) naming the
// bad part and the expected form.
std::set<int> parse_exit_codes(std::string_view text);
// The codes back as text, runs of three or more as LO-HI: "140,143,200-210".
std::string format_exit_codes(const std::set<int>& codes);

enum class RequeueVerdict {
  requeue,       // the code is listed and requeues are left
  not_listed,    // the code is not in --requeue-on: exit with it
  budget_spent,  // listed, but SLURM_RESTART_COUNT already reached --max-requeues
};

// `restart_count`: SLURM_RESTART_COUNT (0 when unset: the first run).
RequeueVerdict requeue_verdict(int code, const std::set<int>& codes, int restart_count, int max_requeues);

// The job `scontrol requeue` names: ARRAYJOB_TASK (SLURM_ARRAY_JOB_ID _ SLURM_ARRAY_TASK_ID) for an
// array task, else SLURM_JOB_ID (or SLURM_JOBID); nullopt outside a job.
std::optional<std::string> requeue_target(const EnvSnapshot& env);

}  // namespace ddprun::core
