#pragma once
// What each worker executes: the user's COMMAND turned into an argv. The one command builder: the
// resolution (and so the dry-run) shows its result and the agent runs it.
#include <string>
#include <vector>

namespace ddprun::core {

// torch.distributed.launch's per-worker argument, for scripts that parse it instead of LOCAL_RANK.
enum class LocalRankArg {
  none,        // env only (torchrun's way, the default)
  underscore,  // --local_rank=N (torch.distributed.launch before 2.0, DeepSpeed)
  dash,        // --local-rank=N (torch.distributed.launch from 2.0)
};

// "none" | "underscore" | "dash"; throws Error naming --local-rank-arg for anything else.
LocalRankArg parse_local_rank_arg(const std::string& v);

struct CommandSpec {
  std::vector<std::string> command;  // COMMAND [ARGS...] as given, or MODULE [ARGS...] with module
  bool no_python = false;            // run COMMAND as it is, even if it ends in .py
  bool module = false;               // -m: run `python -u -m MODULE ARGS...`
  std::string python = "python3";
  LocalRankArg local_rank_arg = LocalRankArg::none;
};

// True when COMMAND runs under the interpreter: -m, or a first word ending in .py (not --no-python).
bool runs_under_python(const CommandSpec& spec);

// The argv workers run. Pure: `train.py a` -> `python3 -u train.py a`; `-m pkg a` ->
// `python3 -u -m pkg a`; anything else (or --no-python) as is. -u keeps Python's output unbuffered
// so lines reach the relay when they are printed. Throws Error for an empty command and for -m
// together with --no-python.
std::vector<std::string> build_argv(const CommandSpec& spec);

// The argv of the worker with this local rank: build_argv, plus --local_rank=N / --local-rank=N
// right after the script, the module or the program (the command's first word), before the user's
// arguments, where torch.distributed.launch puts it. Without local_rank_arg: build_argv's.
std::vector<std::string> worker_argv(const CommandSpec& spec, int local_rank);

}  // namespace ddprun::core
