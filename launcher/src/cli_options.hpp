#pragma once
// What cli.cpp and the option adders in their own units (cli_rendezvous_options.cpp) share. Internal to
// the CLI.
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include "core/config.hpp"

namespace ddprun::launcher {

// One of `values`, checked by CLI11 for the flag and its DDPRUN_* variable alike; help shows a|b|c.
inline CLI::Option* one_of(CLI::Option* opt, const std::vector<std::string>& values) {
  return opt->check(CLI::IsMember(values).description(""))
      ->type_name(fmt::format("{}", fmt::join(values, "|")));
}

// Accepted for torchrun compatibility and ignored; the value must still parse as T.
template <typename T>
void ignored(CLI::App& app, const std::string& names, const std::string& help, const std::string& group) {
  app.add_option_function<T>(
         names, [](const T&) {}, help)
      ->group(group);
}

// The "Rendezvous" group, in --help's order (cli_rendezvous_options.cpp).
void add_store_options(CLI::App& app, core::Options& o);
void add_auth_options(CLI::App& app, core::Options& o);

}  // namespace ddprun::launcher
