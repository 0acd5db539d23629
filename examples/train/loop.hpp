// The training run: set-up, the epoch and step loop, checkpoints and preemption.
#pragma once

#include "options.hpp"

namespace ddprun::train {

// Trains as the options say, in the process group the environment describes. Returns the exit
// code: kExitOk, or 128 + signal after a preemption checkpoint. Errors are thrown.
int run(Options o);

}  // namespace ddprun::train
