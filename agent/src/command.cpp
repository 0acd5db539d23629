#include "agent/command.hpp"

#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>

#include "agent/error.hpp"

namespace ddprun::agent {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_executable_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
}

}  // namespace

std::vector<std::string> build_argv(const CommandSpec& spec) {
  if (spec.command.empty() || spec.command.front().empty()) {
    throw Error(spec.module ? "no module given after -m; usage: ddprun [OPTIONS] -m MODULE [ARGS...]"
                            : "no command given; usage: ddprun [OPTIONS] COMMAND [ARGS...]");
  }
  const bool python = !spec.no_python && (spec.module || ends_with(spec.command.front(), ".py"));
  if (!python) return spec.command;
  std::vector<std::string> argv{spec.python, "-u"};
  if (spec.module) argv.emplace_back("-m");
  argv.insert(argv.end(), spec.command.begin(), spec.command.end());
  return argv;
}

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
  const auto found = find_in_path(r.argv.front(), path_env);
  if (!found) {
    if (r.argv.front() == spec.python && r.argv.front() != spec.command.front()) {
      throw Error("python interpreter '" + spec.python +
                      "' not found in PATH; install it or pass --python PATH (or --no-python)",
                  kNotFound);
    }
    throw Error("command not found in PATH: " + r.argv.front() + "; give a path or fix PATH", kNotFound);
  }
  r.program = *found;
  if (!spec.no_python && !spec.module && ends_with(spec.command.front(), ".py")) {
    const std::string& script = spec.command.front();
    if (::access(script.c_str(), R_OK) != 0) {
      const int err = errno;
      throw Error(std::string(err == ENOENT ? "no such file: " : "cannot read script ") + script +
                      (err == ENOENT ? "" : std::string(": ") + std::strerror(err)),
                  err == ENOENT ? kNotFound : kCannotExecute);
    }
  }
  return r;
}

}  // namespace ddprun::agent
