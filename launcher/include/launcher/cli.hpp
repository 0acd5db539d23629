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
// over DDPRUN_* variables, which CLI11 reads as each option's environment fallback, and those over
// torchrun's PET_* variables.
CliResult parse_cli(int argc, const char* const* argv);

// torchrun 2.x reads PET_<DEST> for its options (DEST: the first long name, '-' as '_', upper case).
// The ones ddprun reads: each with the ddprun option it fills.
struct PetVariable {
  const char* option;    // as CLI11 finds it: "--nproc-per-node", "-t"
  const char* variable;  // "PET_NPROC_PER_NODE", "PET_TEE"
};
const std::vector<PetVariable>& pet_variables();

// The variable an option reads: its DDPRUN_ variable when set, else its PET_ variable when set, else
// its DDPRUN_ variable (what --help names; may be empty when it has none).
std::string env_variable_for(const std::string& ddprun_var, bool ddprun_set, const std::string& pet_var,
                             bool pet_set);

}  // namespace ddprun::launcher
