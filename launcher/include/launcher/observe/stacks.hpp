#pragma once
// `ddprun stacks` (docs/observe.md): every rank's current stack, without stopping the job, grouped so
// that ranks in the same frames print once with a rank list.
namespace ddprun::launcher {

// argv[1] is "stacks". Returns the exit code: 0, 1 when the job cannot be read, 2 for bad usage.
int stacks_main(int argc, const char* const* argv);

}  // namespace ddprun::launcher
