// ddprun: parse, resolve, then dry-run, expand hostlists, self-launch under a batch script, or run the agent.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/hostlist.hpp"
#include "launcher/cli.hpp"
#include "launcher/dry_run.hpp"
#include "launcher/job.hpp"
#include "launcher/self_launch.hpp"
#include "launcher/system.hpp"

namespace {

int hostlist_main(const std::vector<std::string>& exprs) {
  if (exprs.empty()) {
    fmt::print(
        stderr,
        "ddprun hostlist: give at least one hostlist expression, e.g. ddprun hostlist 'node[01-04]'\n");
    return ddprun::core::kUsageExit;
  }
  std::string out;  // all or nothing on stdout
  for (const auto& expr : exprs) {
    for (const auto& h : ddprun::core::expand_hostlist(expr)) out += h + "\n";
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ddprun;
  try {
    auto cli = launcher::parse_cli(argc, argv);
    if (cli.exit_now) return *cli.exit_now;
    if (cli.hostlist) return hostlist_main(*cli.hostlist);
    const auto env = launcher::snapshot_environ();
    const auto resolved = core::resolve(cli.options, env, launcher::probe_system());
    // Building the plan validates the layout before anything starts, in every mode.
    const auto plan = launcher::dry_run_plan(resolved);
    if (cli.options.dry_run) {
      std::cout << (cli.options.format == "json" ? launcher::render_plan_json(resolved, plan)
                                                 : launcher::render_plan_text(resolved, plan));
      return 0;
    }
    if (resolved.context == core::SlurmContext::batch) launcher::exec_self_launch(resolved, argc, argv);
    return launcher::run_job(cli.options, resolved);
  } catch (const core::Error& e) {
    fmt::print(stderr, "ddprun: error: {}\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    fmt::print(stderr, "ddprun: error: {}\n", e.what());
    return 1;
  }
}
