#include "agent/command.hpp"

#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "agent/error.hpp"

namespace ddprun::agent {

namespace {

bool is_executable_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
}

bool is_directory(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

[[noreturn]] void interpreter_missing(const std::string& python, bool module) {
  const bool in_path = python.find('/') == std::string::npos;
  throw Error(fmt::format("python interpreter '{}' not found{}; install it or pass --python PATH{}", python,
                          in_path ? " in PATH" : "", module ? "" : " (or --no-python)"),
              kNotFound);
}

[[noreturn]] void is_a_directory(const std::string& path, const char* what) {
  throw Error(fmt::format("is a directory: {}; give the {} to run", path, what), kCannotExecute);
}

// The program execve will run, found in PATH or given as a path (which find_in_path does not check).
std::string find_program(const std::string& name, const std::string& path_env, bool python, bool module) {
  const auto found = find_in_path(name, path_env);
  if (found && is_directory(*found)) {
    if (python) {
      throw Error(fmt::format("python interpreter '{}' is a directory; pass --python PATH", name),
                  kCannotExecute);
    }
    is_a_directory(name, "program");
  }
  if (found && exists(*found)) return *found;
  if (python) interpreter_missing(name, module);
  if (found) throw Error(fmt::format("no such file: {}", name), kNotFound);
  if (is_directory(name)) is_a_directory(name, "program");
  throw Error(fmt::format("command not found in PATH: {}; give a path or fix PATH", name), kNotFound);
}

// The .py script python is about to open.
void check_script(const std::string& script) {
  if (is_directory(script)) is_a_directory(script, "script");
  if (::access(script.c_str(), R_OK) == 0) return;
  const int err = errno;
  if (err == ENOENT || err == ENOTDIR) throw Error(fmt::format("no such file: {}", script), kNotFound);
  throw Error(fmt::format("cannot read script {}: {}", script, std::strerror(err)), kCannotExecute);
}

}  // namespace

std::optional<std::string> find_in_path(const std::string& name, const std::string& path_env) {
  if (name.find('/') != std::string::npos) return name;
  std::size_t start = 0;
  while (start <= path_env.size()) {
    auto end = path_env.find(':', start);
    if (end == std::string::npos) end = path_env.size();
    // An empty PATH entry means the current directory. Built by appending: assigning or adding
    // string literals here trips GCC 12's -Wrestrict false positive at -O3.
    std::string candidate = end > start ? path_env.substr(start, end - start) : std::string(1, '.');
    candidate += '/';
    candidate += name;
    if (is_executable_file(candidate)) return candidate;
    start = end + 1;
  }
  return std::nullopt;
}

ResolvedCommand resolve_command(const CommandSpec& spec, const std::string& path_env) {
  ResolvedCommand r;
  r.argv = build_argv(spec);
  const bool python = core::runs_under_python(spec);
  r.program = find_program(r.argv.front(), path_env, python, spec.module);
  if (python && !spec.module) check_script(spec.command.front());
  return r;
}

}  // namespace ddprun::agent
