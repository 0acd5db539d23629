// The agent's options: the checks a run and a dry run share.
#include "agent/options.hpp"
#include "agent/command.hpp"
#include "agent/error.hpp"
#include "core/checks.hpp"
#include "log_relay.hpp"

namespace ddprun::agent {

CommandSpec command_spec(const AgentOptions& opts) {
  return CommandSpec{opts.command, opts.no_python, opts.module, opts.python, opts.local_rank_arg};
}

void validate_options(const AgentOptions& opts) {
  build_argv(command_spec(opts));
  if (opts.prefix_template) render_prefix(*opts.prefix_template, PrefixFields{});
  if (opts.tee && !opts.log_dir) {
    throw Error("--tee writes per-rank files and needs --log-dir DIR to know where");
  }
  const auto secs = [](std::chrono::milliseconds ms) { return static_cast<double>(ms.count()) / 1000.0; };
  if (auto e = core::term_timeout_error(secs(opts.term_timeout))) throw Error(*e);
  if (opts.hang_timeout) {
    if (auto e = core::hang_timeout_error(secs(*opts.hang_timeout))) throw Error(*e);
  }
}

}  // namespace ddprun::agent
