#include "launcher/cli.hpp"

#include <cstdlib>
#include <iostream>
#include <memory>
#include <regex>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include "cli_options.hpp"
#include "cli_variables.hpp"
#include "core/defaults.hpp"
#include "launcher/version.hpp"

namespace ddprun::launcher {

namespace {

constexpr const char* kDescription =
    "ddprun: a Slurm-native distributed launcher for PyTorch-style training, compatible with torchrun.\n"
    "Inside `srun` it reads the step's Slurm variables; in a batch script it re-launches itself on every\n"
    "node with srun; outside Slurm it takes torchrun-style flags. Workers get RANK, LOCAL_RANK, WORLD_SIZE,\n"
    "LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_*, CUDA_VISIBLE_DEVICES and\n"
    "OMP_NUM_THREADS. An option marked (Env:DDPRUN_<NAME>) also reads that variable; flags win. torchrun's\n"
    "PET_<NAME> variables (PET_NPROC_PER_NODE, ...) are read too, below DDPRUN_<NAME>. torchrun's\n"
    "spellings (--nproc_per_node, --tee 3, --start_method, ...) are accepted; a repeated option takes the "
    "last value.";

constexpr const char* kUsage =
    "Usage: ddprun [OPTIONS] [--] COMMAND [ARGS...]\n"
    "       ddprun --dry-run [--format text|json] [OPTIONS] [--] COMMAND [ARGS...]\n"
    "       ddprun hostlist EXPR...        expand Slurm hostlists, one host per line\n"
    "       ddprun top [--once] [--format text|json] --rdzv-endpoint HOST:PORT --rdzv-id ID | --job JOBID\n"
    "                                      a running job's ranks, live (docs/observe.md)\n"
    "       ddprun stacks [--rank 3,7-9] [--format text|json] --rdzv-endpoint HOST:PORT --rdzv-id ID | --job "
    "JOBID\n"
    "                                      every rank's stack, without stopping the job\n";

// `ddprun --help` starts with our usage lines, once (CLI11's own would read `ddprun [OPTIONS]
// [COMMAND...] [SUBCOMMAND]`), then the description and the options. Subcommands keep CLI11's layout.
class HelpFormatter final : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App* app, std::string name) const override {
    return app->get_parent() == nullptr ? kUsage : CLI::Formatter::make_usage(app, std::move(name));
  }
  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const override {
    if (app->get_parent() != nullptr) return CLI::Formatter::make_help(app, std::move(name), mode);
    return make_usage(app, name) + "\n" + make_description(app) + make_positionals(app) +
           make_groups(app, mode) + make_subcommands(app, mode);
  }
  // A flag's default value, CLI11's "--tee{1}" (how --tee alone gets level 1), is not for the reader.
  std::string make_option_name(const CLI::Option* opt, bool positional) const override {
    std::string name = CLI::Formatter::make_option_name(opt, positional);
    for (auto open = name.find('{'); open != std::string::npos; open = name.find('{', open)) {
      const auto close = name.find('}', open);
      if (close == std::string::npos) break;
      name.erase(open, close - open + 1);
    }
    return name;
  }
};

// torchrun's levels for -t/--tee and -r/--redirects: 0-3, or LOCAL_RANK:LEVEL,... as in 0:1,1:2.
bool is_tee_level(const std::string& v) {
  static const std::regex level("[0-9]+|[0-9]+:[0-9]+(,[0-9]+:[0-9]+)*");
  return std::regex_match(v, level);
}

// Any level but 0 turns on --tee (for a per-rank list: any rank's level but 0).
bool tee_on(const std::string& opt, const std::string& level) {
  if (!is_tee_level(level)) {
    throw core::Error(fmt::format(
        "{} '{}' is not a torchrun level; give 0 to 3, or LOCAL_RANK:LEVEL pairs as in 0:3,1:1", opt, level));
  }
  static const std::regex nonzero("(^|:)0*[1-9][0-9]*(,|$)");
  return std::regex_search(level, nonzero);
}

// torchrun's `--tee 3`: ddprun's --tee is a flag (it never takes the next word as its value, which
// may be the COMMAND), so a torchrun level after it is joined as `--tee=3` before CLI11 parses.
// Scans ddprun's own options only: it stops at `--` and at the first word that is not an option or
// an option's value (the COMMAND).
std::vector<std::string> join_tee_level(const CLI::App& app, int argc, const char* const* argv) {
  std::vector<std::string> out(argv, argv + argc);
  for (std::size_t i = 1; i < out.size(); ++i) {
    const std::string& a = out[i];
    if (a == "--" || a.empty() || a.front() != '-' || a == "-") break;
    if (a == "--tee" && i + 1 < out.size() && is_tee_level(out[i + 1])) {
      out[i] = "--tee=" + out[i + 1];
      out.erase(out.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      continue;
    }
    if (a.find('=') != std::string::npos || (a.size() > 2 && a[1] != '-')) continue;  // --x=v, -t3
    const CLI::Option* opt = app.get_option_no_throw(a);
    if (opt != nullptr && opt->get_expected_min() > 0 && opt->get_type_size() > 0) ++i;  // skip its value
  }
  return out;
}

void add_job_options(CLI::App& app, core::Options& o) {
  const std::string g = "Job shape";
  app.add_option("--nnodes", o.nnodes,
                 "Nodes: N or MIN:MAX (default: the Slurm step's, else 1). With --max-restarts, the job "
                 "goes on without a lost node while MIN remain, standbys included; agents beyond MAX, and "
                 "any that arrive after a round closed, are standbys (docs/elastic.md)")
      ->group(g)
      ->type_name("N|MIN:MAX");
  app.add_option("--nproc-per-node,--nproc_per_node", o.nproc_per_node,
                 "Workers per node: N, gpu (GPUs / G), cpu, or auto (default: one per GPU group "
                 "when GPUs are visible, else 1)")
      ->group(g)
      ->type_name("N|gpu|cpu|auto");
  app.add_option("--node-rank,--node_rank", o.node_rank,
                 "This node's rank (default: SLURM_NODEID, else 0); under Slurm only its SLURM_NODEID")
      ->group(g);
  app.add_option("--gpus-per-proc,--gpus_per_proc", o.gpus_per_proc,
                 "G GPUs per worker: each gets a disjoint slice of the node's GPUs as "
                 "CUDA_VISIBLE_DEVICES (default: every worker sees all)")
      ->group(g)
      ->type_name("G");
  app.add_flag("--virtual-local-rank,--virtual_local_rank", o.virtual_local_rank,
               "torchrun 2.x's: every worker gets LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES naming only its own "
               "GPUs (its --gpus-per-proc slice, else the node's GPU at its local rank), so it uses cuda:0")
      ->group(g);
  app.add_option("--procs-per-replica,--procs_per_replica", o.procs_per_replica,
                 "P consecutive workers per model-parallel group; exports DDPRUN_MP_RANK/SIZE and "
                 "DDPRUN_DP_RANK/SIZE (default 1)")
      ->group(g)
      ->type_name("P");
  app.add_flag("--standalone", o.standalone, "Single node, no Slurm; no rendezvous store is opened")
      ->group(g);
  app.add_option("--role", o.role, "Role name exported as ROLE_NAME (default: default)")->group(g);
  one_of(app.add_option(
             "--cpu-bind", o.cpu_bind,
             "Bind each local worker to CPUs (hwloc topology, within this agent's affinity): none "
             "(default), cores (an equal share of whole cores each), numa (NUMA nodes in blocks), gpu "
             "(the NUMA node of its first GPU, else as numa); OMP_NUM_THREADS follows unless set"),
         {"none", "cores", "numa", "gpu"})
      ->group(g);
  one_of(
      app.add_option("--start-method,--start_method", o.start_method,
                     "Accepted for torchrun compatibility; ignored (workers are always separate processes)"),
      {"spawn", "fork", "forkserver"})
      ->group(g);
}

void add_run_options(CLI::App& app, core::Options& o) {
  const std::string g = "Running the command";
  app.add_flag("-m,--module", o.module, "Run COMMAND as a Python module (python -m COMMAND)")->group(g);
  app.add_flag("--no-python,--no_python", o.no_python, "Run COMMAND as it is, even when it ends in .py")
      ->group(g);
  app.add_flag("--run-path,--run_path", o.run_path,
               "torchrun's --run_path: accepted; overrides --no-python (a .py script runs in a "
               "fresh interpreter, as always)")
      ->group(g);
  app.add_option("--python", o.python, "Python interpreter for .py and -m (default python3 from PATH)")
      ->group(g);
  one_of(app.add_option("--local-rank-arg,--local_rank_arg", o.local_rank_arg,
                        "For scripts written for torch.distributed.launch: pass each worker its local rank "
                        "as --local_rank=N (underscore) or --local-rank=N (dash), right after the script, "
                        "module or program (default none: LOCAL_RANK only)"),
         {"none", "underscore", "dash"})
      ->group(g);
  app.add_flag_function(
         "--use-env,--use_env", [](std::int64_t) {},
         "torch.distributed.launch's --use_env: accepted; ignored (LOCAL_RANK and the rest are always in "
         "the environment)")
      ->group(g);
  app.add_flag("--dry-run", o.dry_run,
               "Print the plan (every worker of the job, with its environment) and exit")
      ->group(g);
  one_of(app.add_option("--format", o.format, "Dry-run output: text or json"), {"text", "json"})->group(g);
}

// The levels of --tee, -t and -r as given; parse_cli turns them into Options::tee.
struct TeeLevels {
  std::string tee = "0";
  std::string t = "0";
  std::string redirects = "0";
};

// Teardown, hang detection, metrics and the health check.
void add_supervision_options(CLI::App& app, core::Options& o) {
  const std::string g = "Supervision and logs";
  app.add_option(
         "--term-timeout", o.term_timeout,
         fmt::format("Seconds between SIGTERM and SIGKILL at teardown (default {}; fits Slurm's KillWait)",
                     core::kDefaultTermTimeout.count()))
      ->group(g);
  app.add_option("--hang-timeout", o.hang_timeout,
                 "Declare the job hung when a rank prints nothing and touches no DDPRUN_HEARTBEAT_FILE for "
                 "this many seconds: collect its stack, tear down, exit 124 (default off)")
      ->group(g)
      ->type_name("SECONDS");
  app.add_option("--metrics-port", o.metrics_port,
                 "Serve every rank's status (state, RSS, CPU%, seconds since progress, restarts) in "
                 "Prometheus text format at http://NODE:PORT/metrics from node 0's agent (docs/observe.md)")
      ->check(CLI::Range(1, 65535))
      ->group(g)
      ->type_name("PORT");
  app.add_flag("--metrics-all-nodes", o.metrics_all_nodes,
               "With --metrics-port: every node's agent serves its own node's ranks on that port")
      ->group(g);
  app.add_option(
         "--health-check", o.health_check,
         "Shell command (sh -c) every agent (per-task mode: each node's local task 0) runs before "
         "it joins a rendezvous round; a node whose check fails or times out does not join and "
         "exits 125; a fail-fast job ends on every node, an elastic one (--max-restarts) goes on without "
         "the node (see examples/health/gpu_node_check.sh); an empty CMD or one starting with - is a usage "
         "error")
      ->group(g)
      ->type_name("CMD");
  app.add_option("--health-check-timeout", o.health_check_timeout,
                 "Seconds the --health-check command may run before it is killed and counts as failed: 1 "
                 "to 86400 (default 60)")
      ->group(g)
      ->type_name("SECONDS");
}

// How each rank's output and ddprun's own messages show.
void add_output_options(CLI::App& app, core::Options& o, TeeLevels& levels) {
  const std::string g = "Supervision and logs";
  app.add_option("--prefix", o.prefix,
                 "Log line prefix template; {rank} {local_rank} {node_rank} {host} {role} "
                 "(default '[{rank}]: ' when the world size is above 1)")
      ->group(g);
  app.add_flag("--no-prefix", o.no_prefix, "Do not prefix worker output")->group(g);
  app.add_flag("--tee{1}", levels.tee,
               "Also write each rank's output to files in --log-dir; torchrun's --tee LEVEL: a level but 0 "
               "means --tee")
      ->group(g)
      ->type_name("[LEVEL]");
  app.add_option("-t", levels.t, "torchrun's -t LEVEL: a level but 0 means --tee")->group(g);
  app.add_option("-r,--redirects", levels.redirects, "torchrun's redirects level: a level but 0 means --tee")
      ->group(g);
  app.add_option("--log-dir,--log_dir", o.log_dir, "Directory for per-rank log files and the report")
      ->group(g);
  app.add_option("--local-ranks-filter,--local_ranks_filter", o.local_ranks_filter,
                 "Show only these local ranks on the console, e.g. 0 or 0,2-3")
      ->group(g);
  app.add_option("--error-file", o.error_file, "Write the failure report as JSON to this file")->group(g);
  ignored<double>(app, "--monitor-interval,--monitor_interval",
                  "Accepted for torchrun compatibility; ignored (supervision is event driven)", g);
  app.add_flag("-q,--quiet", o.quiet,
               "No startup table, progress, summary table or unauthenticated-store warning; a failure "
               "still prints its root cause")
      ->group(g);
  app.add_flag("--verbose", o.verbose,
               "Every node prints its own failure report and summary table (default with several nodes: "
               "node 0 prints the job-wide summary, the others one line each)")
      ->group(g);
  one_of(app.add_option("--log-format", o.log_format,
                        "ddprun's own messages: text, or json (one event per line on stderr; worker output "
                        "unchanged)"),
         {"text", "json"})
      ->group(g);
}

// Flags CLI11 did not know are left over (allow_extras) so that they get our message. A command that
// starts with '-' must come after `--`, which CLI11 leaves over too.
void reject_unknown_flags(const CLI::App& app) {
  for (const auto& arg : app.remaining()) {
    if (arg == "--") continue;
    throw core::Error(fmt::format(
        "unknown flag '{}'; see ddprun --help (put -- before a command that starts with -)", arg));
  }
}

// `ddprun hostlist EXPR...`; an EXPR cannot start with '-'.
CLI::App* add_hostlist(CLI::App& app, std::vector<std::string>& exprs) {
  CLI::App* sub = app.add_subcommand(
      "hostlist", "Expand Slurm hostlists, one host per line, like scontrol show hostnames");
  sub->allow_extras(false);
  sub->add_option("EXPR", exprs, "A hostlist expression, e.g. 'node[01-04]'");
  return sub;
}

// Every option, the hostlist subcommand (returned) and the parser's settings.
CLI::App* build_app(CLI::App& app, core::Options& o, TeeLevels& levels, std::vector<std::string>& exprs) {
  app.allow_extras();        // unknown flags: see reject_unknown_flags
  app.positionals_at_end();  // everything from COMMAND on belongs to the command, `--` included
  // As torchrun (argparse): a repeated option takes its last value, so wrappers can append flags.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.set_help_flag("-h,--help", "Print this help and exit");
  // A callback: the optional libraries are looked for only when --version asks.
  app.set_version_flag("-V,--version", std::function<std::string()>(version_string),
                       "Print version and build information, and which optional libraries were found");
  auto formatter = std::make_shared<HelpFormatter>();
  formatter->column_width(36);
  app.formatter(formatter);
  add_job_options(app, o);
  add_store_options(app, o);
  add_auth_options(app, o);
  add_run_options(app, o);
  add_supervision_options(app, o);
  add_output_options(app, o, levels);
  app.add_option("COMMAND", o.command, "The command and its arguments (after --, it may start with -)")
      ->type_name("ARGS");
  give_variables(app);
  return add_hostlist(app, exprs);
}

// The variable whose value CLI11 rejected with `error`, if one did: each option that reads a set
// variable is parsed again alone, from that variable only; the one failing with the same error is it.
std::optional<std::string> variable_error(const CLI::App& app, const std::string& error) {
  for (const CLI::Option* opt : app.get_options()) {
    const std::string var = opt->get_envname();
    if (!env_set(var)) continue;
    CLI::App alone;
    core::Options o;
    TeeLevels levels;
    std::vector<std::string> exprs;
    build_app(alone, o, levels, exprs);
    for (CLI::Option* other : alone.get_options()) other->envname("");
    alone.get_option(opt->get_name())->envname(var);
    const char* argv0 = "ddprun";
    try {
      alone.parse(1, &argv0);
    } catch (const CLI::ParseError& e) {
      if (e.what() == error)
        return fmt::format("{}={}: {}; see ddprun --help", var, std::getenv(var.c_str()), error);
    }
  }
  return std::nullopt;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> option_variables() {
  CLI::App app;
  core::Options o;
  TeeLevels levels;
  std::vector<std::string> exprs;
  build_app(app, o, levels, exprs);
  std::vector<std::pair<std::string, std::string>> out;
  for (const CLI::Option* opt : app.get_options()) out.emplace_back(opt->get_name(), opt->get_envname());
  return out;
}

CliResult parse_cli(int argc, const char* const* argv) {
  CliResult res;
  core::Options& o = res.options;
  CLI::App app{kDescription, "ddprun"};
  TeeLevels levels;
  std::vector<std::string> exprs;
  CLI::App* hostlist = build_app(app, o, levels, exprs);
  const auto switched = use_pet_variables(app);
  const std::vector<std::string> args = join_tee_level(app, argc, argv);
  std::vector<const char*> cargs;
  cargs.reserve(args.size());
  for (const auto& a : args) cargs.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(cargs.size()), cargs.data());
  } catch (const CLI::CallForHelp&) {
    for (const auto& [opt, own] : switched) opt->envname(own);  // help names the DDPRUN_ variables
    std::cout << app.help();
    res.exit_now = 0;
    return res;
  } catch (const CLI::CallForVersion& e) {
    std::cout << e.what() << "\n";
    res.exit_now = 0;
    return res;
  } catch (const CLI::ParseError& e) {
    if (auto from_variable = variable_error(app, e.what())) throw core::Error(*from_variable);
    throw core::Error(fmt::format("{}; see ddprun --help", e.what()));
  }
  reject_unknown_flags(app);
  o.from_variable = variable_sources(app);
  const auto named = [&](const std::string& opt) {
    const auto var = o.from_variable.find(opt);
    return var == o.from_variable.end() ? opt : var->second;
  };
  o.tee = tee_on(named("--tee"), levels.tee) || tee_on(named("-t"), levels.t) ||
          tee_on(named("--redirects"), levels.redirects);
  if (o.run_path) o.no_python = false;  // as torchrun: --run_path takes precedence over --no_python
  if (hostlist->parsed()) {             // a `--` ends the subcommand; CLI11 hands what follows to COMMAND
    exprs.insert(exprs.end(), o.command.begin(), o.command.end());
    res.hostlist = std::move(exprs);
  }
  return res;
}

}  // namespace ddprun::launcher
