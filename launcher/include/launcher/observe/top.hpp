#pragma once
// `ddprun top` (docs/observe.md): a running job's ranks, once (--once, text or JSON) or live in the
// terminal until q or Ctrl-C.
namespace ddprun::launcher {

// argv[1] is "top". Returns the exit code: 0, 1 when the job cannot be read, 2 for bad usage.
int top_main(int argc, const char* const* argv);

}  // namespace ddprun::launcher
