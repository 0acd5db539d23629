#include "core/command.hpp"

#include "core/error.hpp"

namespace ddprun::core {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

bool runs_under_python(const CommandSpec& spec) {
  return !spec.no_python &&
         (spec.module || (!spec.command.empty() && ends_with(spec.command.front(), ".py")));
}

std::vector<std::string> build_argv(const CommandSpec& spec) {
  if (spec.module && spec.no_python) throw Error("-m and --no-python contradict each other; use one");
  if (spec.command.empty() || spec.command.front().empty()) {
    throw Error(
        spec.module
            ? "no module given after -m; usage: ddprun [options] -m MODULE [ARGS...] (see ddprun --help)"
            : "no command given; usage: ddprun [options] [--] COMMAND [ARGS...] (see ddprun --help)");
  }
  if (!runs_under_python(spec)) return spec.command;
  std::vector<std::string> argv{spec.python, "-u"};
  if (spec.module) argv.emplace_back("-m");
  argv.insert(argv.end(), spec.command.begin(), spec.command.end());
  return argv;
}

}  // namespace ddprun::core
