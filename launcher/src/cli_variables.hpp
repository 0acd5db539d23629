#pragma once
// The environment variables of the command line's options (docs/cli.md, "Precedence"): every option
// reads DDPRUN_<NAME> by one rule, torchrun's options PET_<NAME> below it. Internal to cli.cpp.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

namespace ddprun::launcher {

// Gives every option of `app` its variable: the rule's, or its row of option_variable_exceptions().
// Throws std::logic_error for an option with no long name and no row (a new option must get one).
void give_variables(CLI::App& app);

// Points each option torchrun reads at the variable env_variable_for picks. Returns the options
// switched to a PET_ variable, each with its own variable (for --help).
std::vector<std::pair<CLI::Option*, std::string>> use_pet_variables(CLI::App& app);

// After a parse: the options whose value came from a variable, not the command line, each with that
// variable ("--node-rank" -> "PET_NODE_RANK").
std::map<std::string, std::string> variable_sources(const CLI::App& app);

// Whether `name` is set and not empty (CLI11 ignores an empty variable).
bool env_set(const std::string& name);

}  // namespace ddprun::launcher
