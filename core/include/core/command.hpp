#pragma once
// What each worker executes: the user's COMMAND turned into an argv. The one command builder: the
// resolution (and so the dry-run) shows its result and the agent runs it.
#include <string>
#include <vector>

namespace ddprun::core {

struct CommandSpec {
  std::vector<std::string> command;  // COMMAND [ARGS...] as given, or MODULE [ARGS...] with module
  bool no_python = false;            // run COMMAND as it is, even if it ends in .py
  bool module = false;               // -m: run `python -u -m MODULE ARGS...`
  std::string python = "python3";
};

// True when COMMAND runs under the interpreter: -m, or a first word ending in .py (not --no-python).
bool runs_under_python(const CommandSpec& spec);

// The argv workers run. Pure: `train.py a` -> `python3 -u train.py a`; `-m pkg a` ->
// `python3 -u -m pkg a`; anything else (or --no-python) as is. -u keeps Python's output unbuffered
// so lines reach the relay when they are printed. Throws Error for an empty command and for -m
// together with --no-python.
std::vector<std::string> build_argv(const CommandSpec& spec);

}  // namespace ddprun::core
