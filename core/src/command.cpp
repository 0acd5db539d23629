#include "core/command.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace ddprun::core {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

LocalRankArg parse_local_rank_arg(const std::string& v) {
  if (v == "none") return LocalRankArg::none;
  if (v == "underscore") return LocalRankArg::underscore;
  if (v == "dash") return LocalRankArg::dash;
  throw Error(fmt::format(
      "--local-rank-arg '{}' is not a style; give underscore (--local_rank=N), dash (--local-rank=N) or none",
      v));
}

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

std::vector<std::string> worker_argv(const CommandSpec& spec, int local_rank) {
  std::vector<std::string> argv = build_argv(spec);
  if (spec.local_rank_arg == LocalRankArg::none) return argv;
  const char* name = spec.local_rank_arg == LocalRankArg::underscore ? "--local_rank" : "--local-rank";
  // build_argv puts its prefix (python3 -u [-m]) before the user's words: skip it and the first word.
  const auto at = argv.size() - spec.command.size() + 1;
  argv.insert(argv.begin() + static_cast<std::ptrdiff_t>(at), fmt::format("{}={}", name, local_rank));
  return argv;
}

}  // namespace ddprun::core
