#include "launcher/cli.hpp"

#include <iostream>
#include <string_view>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

namespace ddprun::launcher {

std::string version_string() {
  return fmt::format("ddprun {} (git {}, built {} with g++ {}.{})", DDPRUN_VERSION, DDPRUN_GIT_REV, __DATE__,
                     __GNUC__, __GNUC_MINOR__);
}

namespace {

constexpr const char* kDescription =
    "ddprun: a Slurm-native distributed launcher for PyTorch-style training, compatible with torchrun.\n"
    "Inside `srun` it reads the step's Slurm variables; in a batch script it re-launches itself on every\n"
    "node with srun; outside Slurm it takes torchrun-style flags. Workers get RANK, LOCAL_RANK, WORLD_SIZE,\n"
    "LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_*, CUDA_VISIBLE_DEVICES and\n"
    "OMP_NUM_THREADS. Every option also reads DDPRUN_<NAME> (e.g. DDPRUN_NPROC_PER_NODE); flags win.\n\n"
    "Usage: ddprun [options] [--] COMMAND [ARGS...]\n"
    "       ddprun hostlist EXPR...      expand Slurm hostlists, one host per line\n";

template <typename T>
void store_if(const CLI::Option* opt, const T& value, std::optional<T>& out) {
  if (opt->count() > 0) out = value;
}

}  // namespace

CliResult parse_cli(int argc, const char* const* argv) {
  CliResult res;
  core::Options& o = res.options;
  CLI::App app{kDescription, "ddprun"};
  app.prefix_command();  // everything from COMMAND on belongs to the command
  app.set_help_flag("-h,--help", "Print this help and exit");
  app.get_formatter()->column_width(36);

  std::string nnodes, nproc, rdzv_endpoint, rdzv_id, master_addr, master_port, prefix, log_dir, ranks_filter,
      error_file, rdzv_token_file, rdzv_backend, rdzv_conf, tee_level, redirects;
  int node_rank = 0, max_restarts = 0, gpus_per_proc = 0, procs_per_replica = 0;
  double rdzv_timeout = 0, last_call = 0, monitor_interval = 0;
  bool version = false;

  auto env = [](const char* name) { return std::string("DDPRUN_") + name; };
  const std::string job = "Job shape";
  const std::string rdzv = "Rendezvous";
  const std::string run = "Running the command";
  const std::string logs = "Supervision and logs";

  auto* o_nnodes =
      app.add_option("--nnodes", nnodes, "Nodes: N or MIN:MAX (default: the Slurm step's, else 1)")
          ->envname(env("NNODES"))
          ->group(job)
          ->type_name("N|MIN:MAX");
  auto* o_nproc =
      app.add_option("--nproc-per-node,--nproc_per_node", nproc,
                     "Workers per node: N, gpu (GPUs / G), cpu, or auto (default: one per GPU group "
                     "when GPUs are visible, else 1)")
          ->envname(env("NPROC_PER_NODE"))
          ->group(job)
          ->type_name("N|gpu|cpu|auto");
  auto* o_node_rank =
      app.add_option("--node-rank,--node_rank", node_rank, "This node's rank (default: SLURM_NODEID, else 0)")
          ->envname(env("NODE_RANK"))
          ->group(job);
  auto* o_gpp = app.add_option("--gpus-per-proc,--gpus_per_proc", gpus_per_proc,
                               "G GPUs per worker: each gets a disjoint slice of the node's GPUs as "
                               "CUDA_VISIBLE_DEVICES (default: every worker sees all)")
                    ->envname(env("GPUS_PER_PROC"))
                    ->group(job)
                    ->type_name("G");
  auto* o_ppr =
      app.add_option("--procs-per-replica,--procs_per_replica", procs_per_replica,
                     "P consecutive workers per model-parallel group; exports DDPRUN_MP_RANK/SIZE and "
                     "DDPRUN_DP_RANK/SIZE (default 1)")
          ->envname(env("PROCS_PER_REPLICA"))
          ->group(job)
          ->type_name("P");
  app.add_flag("--standalone", o.standalone, "Single node, no Slurm, rendezvous on a free local port")
      ->envname(env("STANDALONE"))
      ->group(job);
  app.add_option("--role", o.role, "Role name exported as ROLE_NAME (default: default)")->group(job);

  auto* o_ep = app.add_option("--rdzv-endpoint,--rdzv_endpoint", rdzv_endpoint,
                              "HOST:PORT of the store served by node rank 0 (default under Slurm: the first "
                              "node, with a port derived from the job id)")
                   ->envname(env("RDZV_ENDPOINT"))
                   ->group(rdzv);
  auto* o_id =
      app.add_option("--rdzv-id,--rdzv_id", rdzv_id, "Run id shared by all agents (default: SLURM_JOB_ID)")
          ->envname(env("RDZV_ID"))
          ->group(rdzv);
  auto* o_to = app.add_option("--rdzv-timeout,--rdzv_timeout", rdzv_timeout,
                              "Seconds to wait for all nodes to join (default 900)")
                   ->envname(env("RDZV_TIMEOUT"))
                   ->group(rdzv);
  auto* o_lc =
      app.add_option("--rdzv-last-call", last_call,
                     "With --nnodes MIN:MAX, seconds to wait for more nodes once MIN joined (default 30)")
          ->envname(env("RDZV_LAST_CALL"))
          ->group(rdzv);
  auto* o_ma =
      app.add_option("--master-addr,--master_addr", master_addr,
                     "MASTER_ADDR for the workers (default: the rendezvous host, else the first node)")
          ->envname(env("MASTER_ADDR"))
          ->group(rdzv);
  auto* o_mp =
      app.add_option("--master-port,--master_port", master_port,
                     "MASTER_PORT for the workers' own store (default: derived from the job id, else "
                     "29500; checked by binding)")
          ->envname(env("MASTER_PORT"))
          ->group(rdzv);
  app.add_option("--rdzv-backend,--rdzv_backend", rdzv_backend,
                 "Accepted for torchrun compatibility; ignored")
      ->group(rdzv);
  app.add_option("--rdzv-conf,--rdzv_conf", rdzv_conf, "Accepted for torchrun compatibility; ignored")
      ->group(rdzv);
  app.add_option("--rdzv-auth", o.rdzv_auth,
                 "Who may join the store: auto (MUNGE if munged runs, else a token if given, else none), "
                 "munge, token, or none; same on every node (see docs/security.md)")
      ->envname(env("RDZV_AUTH"))
      ->group(rdzv)
      ->type_name("auto|munge|token|none");
  auto* o_tf = app.add_option("--rdzv-token-file", rdzv_token_file,
                              "File (mode 0600, yours) holding the shared secret for --rdzv-auth token; "
                              "or set DDPRUN_TOKEN")
                   ->envname(env("TOKEN_FILE"))
                   ->group(rdzv)
                   ->type_name("PATH");
  auto* o_mr = app.add_option("--max-restarts,--max_restarts", max_restarts,
                              "Restart the whole job up to N times after a failure (default 0)")
                   ->envname(env("MAX_RESTARTS"))
                   ->group(rdzv);

  app.add_flag("-m,--module", o.module, "Run COMMAND as a Python module (python -m COMMAND)")->group(run);
  app.add_flag("--no-python,--no_python", o.no_python, "Run COMMAND as it is, even when it ends in .py")
      ->group(run);
  app.add_option("--python", o.python, "Python interpreter for .py and -m (default python3 from PATH)")
      ->envname(env("PYTHON"))
      ->group(run);
  app.add_flag("--dry-run", o.dry_run,
               "Print the plan (every worker of the job, with its environment) and exit")
      ->group(run);
  app.add_option("--format", o.format, "Dry-run output: text or json")->group(run);

  app.add_option("--term-timeout", o.term_timeout,
                 "Seconds between SIGTERM and SIGKILL at teardown (default 10; fits Slurm's KillWait)")
      ->envname(env("TERM_TIMEOUT"))
      ->group(logs);
  auto* o_prefix = app.add_option("--prefix", prefix,
                                  "Log line prefix template; {rank} {local_rank} {node_rank} {host} {role} "
                                  "(default '[{rank}]: ' when the world size is above 1)")
                       ->group(logs);
  app.add_flag("--no-prefix", o.no_prefix, "Do not prefix worker output")->group(logs);
  app.add_flag("--tee", o.tee, "Also write each rank's output to files in --log-dir")->group(logs);
  app.add_option("-t", tee_level, "torchrun's --tee level: non-zero means --tee")->group(logs);
  app.add_option("-r,--redirects", redirects, "torchrun's redirects level: non-zero means --tee")
      ->group(logs);
  auto* o_ld =
      app.add_option("--log-dir,--log_dir", log_dir, "Directory for per-rank log files and the report")
          ->envname(env("LOG_DIR"))
          ->group(logs);
  auto* o_lrf = app.add_option("--local-ranks-filter,--local_ranks_filter", ranks_filter,
                               "Show only these local ranks on the console, e.g. 0 or 0,2-3")
                    ->group(logs);
  auto* o_ef = app.add_option("--error-file", error_file, "Write the failure report as JSON to this file")
                   ->envname(env("ERROR_FILE"))
                   ->group(logs);
  app.add_option("--monitor-interval,--monitor_interval", monitor_interval,
                 "Accepted for torchrun compatibility; ignored (supervision is event driven)")
      ->group(logs);
  app.add_flag("-q,--quiet", o.quiet,
               "No startup table, progress or summary table; a failure still prints its root cause")
      ->group(logs);
  app.add_option(
         "--log-format", o.log_format,
         "ddprun's own messages: text, or json (one event per line on stderr; worker output unchanged)")
      ->envname(env("LOG_FORMAT"))
      ->group(logs);
  app.add_flag("-V,--version", version, "Print version and build information");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::cout << app.help();
    res.exit_now = 0;
    return res;
  } catch (const CLI::ParseError& e) {
    throw core::Error(fmt::format("{}; see ddprun --help", e.what()));
  }
  if (version) {
    std::cout << version_string() << "\n";
    res.exit_now = 0;
    return res;
  }
  store_if(o_nnodes, nnodes, o.nnodes);
  store_if(o_nproc, nproc, o.nproc_per_node);
  store_if(o_node_rank, node_rank, o.node_rank);
  store_if(o_gpp, gpus_per_proc, o.gpus_per_proc);
  store_if(o_ppr, procs_per_replica, o.procs_per_replica);
  store_if(o_ep, rdzv_endpoint, o.rdzv_endpoint);
  store_if(o_id, rdzv_id, o.rdzv_id);
  store_if(o_to, rdzv_timeout, o.rdzv_timeout);
  store_if(o_lc, last_call, o.last_call);
  store_if(o_ma, master_addr, o.master_addr);
  store_if(o_mp, master_port, o.master_port);
  store_if(o_mr, max_restarts, o.max_restarts);
  store_if(o_tf, rdzv_token_file, o.rdzv_token_file);
  store_if(o_prefix, prefix, o.prefix);
  store_if(o_ld, log_dir, o.log_dir);
  store_if(o_lrf, ranks_filter, o.local_ranks_filter);
  store_if(o_ef, error_file, o.error_file);
  if ((!tee_level.empty() && tee_level != "0") || (!redirects.empty() && redirects != "0")) o.tee = true;

  o.command = app.remaining();
  if (!o.command.empty() && o.command.front() == "--") o.command.erase(o.command.begin());
  // CLI11 swallows a `--` before COMMAND; a command after `--` may itself start with '-'.
  const auto cmd_start = static_cast<std::size_t>(argc) - o.command.size();
  const bool after_dashdash = cmd_start >= 1 && std::string_view(argv[cmd_start - 1]) == "--";
  if (!after_dashdash && !o.command.empty() && o.command.front().size() > 1 &&
      o.command.front().front() == '-') {
    throw core::Error(
        fmt::format("unknown flag '{}'; see ddprun --help (put -- before a command that starts with -)",
                    o.command.front()));
  }
  return res;
}

}  // namespace ddprun::launcher
