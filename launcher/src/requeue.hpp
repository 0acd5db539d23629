#pragma once
// --requeue-on's side effects (docs/slurm.md, "Requeue on exit codes"), in the batch script's ddprun after
// the step: Slurm asked what ended the job (`scontrol show job -o`) and told to requeue it (`scontrol
// requeue`). Every decision is core/requeue.hpp's (pure); this is the I/O around it. Private to the launcher.
#include "core/config.hpp"

namespace ddprun::launcher {

// With a listed `code` and requeues left (core::requeue_verdict), runs `scontrol requeue` for the job
// (ARRAYJOB_TASK for an array task) and says so in one line; a failed scontrol is one line too.
// Returns `code` unchanged either way.
int requeue_if_asked(const core::Resolved& r, int code);

}  // namespace ddprun::launcher
