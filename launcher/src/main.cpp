// ddprun: parse, then expand hostlists, or resolve and validate, then dry-run, self-launch under a batch
// script, or run the agent.
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "agent/error.hpp"
#include "agent/spawn.hpp"
#include "agent/topology.hpp"
#include "core/hostlist.hpp"
#include "launcher/agent_options.hpp"
#include "launcher/cli.hpp"
#include "launcher/dry_run.hpp"
#include "launcher/health_check.hpp"
#include "launcher/job.hpp"
#include "launcher/observe/stacks.hpp"
#include "launcher/observe/top.hpp"
#include "launcher/self_launch.hpp"
#include "launcher/start_error.hpp"
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

int fail(const std::string& what, int code) {
  fmt::print(stderr, "ddprun: error: {}\n", what);
  return code;
}

// Building the plan's node table and the agent's options validates the input before anything
// starts, in every mode, and a dry run the same as a run; the workers are derived only for output.
// Returns the dry run's exit code, or nullopt to run. The table (one row per node) is freed here: the
// run derives its own from the agreed plan.
std::optional<int> validate_or_dry_run(const ddprun::core::Options& o, const ddprun::core::Resolved& resolved,
                                       ddprun::agent::AgentOptions& agent_opts) {
  using namespace ddprun;
  const auto table = launcher::dry_run_table(resolved);
  // --cpu-bind: an impossible request fails here, before anything starts; the run binds again on
  // the agreed plan.
  launcher::BoundNode bound;
  if (resolved.cpu_bind != core::CpuBind::none && resolved.context != core::SlurmContext::batch) {
    bound = launcher::bind_this_node(resolved, table,
                                     agent::read_topology(resolved.cpu_bind == core::CpuBind::gpu),
                                     agent::own_affinity());
    if (bound.warning && o.dry_run) fmt::print(stderr, "ddprun: warning: {}\n", *bound.warning);
  }
  agent_opts = launcher::agent_options(o, resolved);
  if (!o.dry_run) return std::nullopt;
  if (const auto w = launcher::dry_run_address_warning(resolved))
    fmt::print(stderr, "ddprun: warning: {}\n", *w);
  if (o.format == "json") {
    const auto exports = launcher::run_exports(agent_opts, agent::current_environment());
    launcher::write_plan_json(std::cout, resolved, table, bound.workers, &exports);
  } else {
    launcher::write_plan_text(std::cout, resolved, table, bound.workers);
  }
  std::cout.flush();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ddprun;
  // Blocks of 128 KiB and more (the per-node tables of a large job: 1.7 MB each at 16,384 nodes) are
  // mapped apart and go back to the system when freed. glibc would otherwise raise this threshold to
  // the largest block freed, and the next tables would come from the heap, whose freed middle stays
  // resident: 1.5 MB of an agent's peak RSS at 16,384 nodes.
  ::mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  // `ddprun top` and `ddprun stacks` have their own options (docs/observe.md).
  if (argc > 1 && std::string(argv[1]) == "top") return launcher::top_main(argc, argv);
  if (argc > 1 && std::string(argv[1]) == "stacks") return launcher::stacks_main(argc, argv);
  try {
    auto cli = launcher::parse_cli(argc, argv);
    if (cli.exit_now) return *cli.exit_now;
    if (cli.hostlist) return hostlist_main(*cli.hostlist);
    const core::Options& o = cli.options;
    const auto env = launcher::snapshot_environ();
    const auto sys = launcher::probe_system();
    ::unsetenv(core::kSelfLaunchJobVar);  // read into `env`: for this agent's step only, never a worker's
    auto resolved = core::resolve_job(o, env, sys);
    agent::AgentOptions agent_opts;
    // What only this node can check fails here alone: the other agents learn of it through the store
    // (docs/rendezvous.md, "Start-up errors") instead of waiting --rdzv-timeout for this node.
    const auto start_error = [&](const std::string& what, int code) {
      fail(what, code);
      launcher::publish_start_error(o, resolved, what, code);
      return code;
    };
    try {
      launcher::apply_rdzv_iface(resolved);  // this node's interface, its address or one line
      core::resolve_node(o, env, sys, resolved);
      if (const auto dry_run_code = validate_or_dry_run(o, resolved, agent_opts)) return *dry_run_code;
      // --health-check (docs/agent.md): a bad node stops here, before the first round, and in per-task
      // mode every node learns of it as of a start-up error. Agent mode checks in the attempts loop,
      // beside the store, so that a check that outlasts the job learns of its end (run_job).
      if (resolved.context != core::SlurmContext::batch && resolved.mode != core::Mode::agent) {
        const auto health = launcher::check_node_health(o, resolved);
        // Stopped meanwhile (scancel): as a stop before the first round, 128 + signal, nothing left.
        if (health.stopped != 0) return 128 + health.stopped;
        if (const auto& bad = health.failure) return start_error(*bad, launcher::kHealthCheckExitCode);
      }
    } catch (const core::Error& e) {
      return start_error(e.what(), e.exit_code());
    } catch (const agent::Error& e) {
      return start_error(e.what(), e.exit_code());
    }
    if (resolved.context == core::SlurmContext::batch) launcher::exec_self_launch(resolved, argc, argv);
    const int code = launcher::run_job(o, std::move(resolved), agent_opts);
    launcher::record_self_launch_result(code);  // for an elastic self-launch on this host, if any
    return code;
  } catch (const core::Error& e) {
    return fail(e.what(), e.exit_code());
  } catch (const agent::Error& e) {
    return fail(e.what(), e.exit_code());
  } catch (const std::exception& e) {
    return fail(e.what(), 1);
  }
}
