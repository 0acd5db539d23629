#pragma once
// What each worker executes: the user's COMMAND, turned into an argv (by the core's one builder)
// and a resolved program path, checked before any worker starts.
#include <optional>
#include <string>
#include <vector>

#include "core/command.hpp"

namespace ddprun::agent {

using core::build_argv;
using core::CommandSpec;

// Looks `name` up like execvp would, in the colon-separated `path_env`. Names containing '/' are
// returned as they are. nullopt when no executable file was found.
std::optional<std::string> find_in_path(const std::string& name, const std::string& path_env);

struct ResolvedCommand {
  std::string program;            // path passed to execve
  std::vector<std::string> argv;  // argv[0] as the user wrote it
};

// build_argv + PATH lookup + checks that the program (or the Python interpreter) and the Python
// script exist and are not directories, done in the agent so that a bad command fails with one clear
// line before any worker starts. Throws Error: 127 for what is missing, 126 for a directory or an
// unreadable script. A program that exists but cannot be executed is left to exec (permission
// denied, 126).
ResolvedCommand resolve_command(const CommandSpec& spec, const std::string& path_env);

}  // namespace ddprun::agent
