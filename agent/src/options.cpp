// The agent's options: the checks a run and a dry run share.
#include "agent/command.hpp"
#include "agent/error.hpp"
#include "agent/supervisor.hpp"
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
  if (opts.term_timeout.count() < 0) throw Error("--term-timeout must not be negative");
  if (opts.hang_timeout && opts.hang_timeout->count() <= 0) {
    throw Error("--hang-timeout must be a positive number of seconds (at least 0.001)");
  }
  if (opts.attempt < 0) throw Error("attempt number must not be negative");
}

}  // namespace ddprun::agent
