#pragma once
// What each worker executes: the user's COMMAND, turned into an argv and a resolved program path.
#include <optional>
#include <string>
#include <vector>

namespace ddprun::agent {

struct CommandSpec {
  std::vector<std::string> command;  // COMMAND [ARGS...] as given, or MODULE [ARGS...] with module
  bool no_python = false;            // run COMMAND as it is, even if it ends in .py
  bool module = false;               // -m: run `python -u -m MODULE ARGS...`
  std::string python = "python3";
};

// The argv workers run. Pure: `train.py a` -> `python3 -u train.py a`; `-m pkg a` ->
// `python3 -u -m pkg a`; anything else (or --no-python) as is. -u keeps Python's output unbuffered
// so lines reach the relay when they are printed. Throws Error for an empty command.
std::vector<std::string> build_argv(const CommandSpec& spec);

// Looks `name` up like execvp would, in the colon-separated `path_env`. Names containing '/' are
// returned as they are. nullopt when no executable file was found.
std::optional<std::string> find_in_path(const std::string& name, const std::string& path_env);

struct ResolvedCommand {
  std::string program;            // path passed to execve
  std::vector<std::string> argv;  // argv[0] as the user wrote it
};

// build_argv + PATH lookup + a check that a Python script exists, done in the agent so that a bad
// command fails with one clear line before any worker starts. Throws Error (exit 126/127).
ResolvedCommand resolve_command(const CommandSpec& spec, const std::string& path_env);

}  // namespace ddprun::agent
