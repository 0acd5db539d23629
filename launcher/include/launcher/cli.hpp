#pragma once
// The ddprun command line (CLI11). Parsing only: resolution happens in config.hpp.
#include <optional>
#include <string>
#include <utility>
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

// Every option reads an environment variable (docs/cli.md, "Precedence"): DDPRUN_ and its first long
// name upper-cased with '-' as '_' ("--nproc-per-node": DDPRUN_NPROC_PER_NODE), unless a row here gives
// another one, or none (variable ""), and says why.
struct VariableException {
  const char* option;    // as --help names it first: "--rdzv-token-file", "-t", "COMMAND"
  const char* variable;  // "" for none
  const char* why;
};
const std::vector<VariableException>& option_variable_exceptions();
std::string variable_by_rule(const std::string& long_name);

// Every option of the command line, by the name --help gives it first, with the DDPRUN_ variable it
// reads ("" for none).
std::vector<std::pair<std::string, std::string>> option_variables();

}  // namespace ddprun::launcher
