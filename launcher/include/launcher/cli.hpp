#pragma once
// The ddprun command line (CLI11). Parsing only: resolution happens in config.hpp.
#include <optional>
#include <string>
#include <vector>

#include "core/config.hpp"

namespace ddprun::launcher {

struct CliResult {
  core::Options options;
  std::optional<int> exit_now;  // --help / --version printed: exit with this code
  // `ddprun hostlist EXPR...`: the expressions to expand (possibly none); options are then unused.
  std::optional<std::vector<std::string>> hostlist;
};

// Parses argv (argv[0] is the program). Unknown flags and missing commands are Errors; flags win
// over DDPRUN_* variables, which CLI11 reads as each option's environment fallback.
CliResult parse_cli(int argc, const char* const* argv);

std::string version_string();

}  // namespace ddprun::launcher
