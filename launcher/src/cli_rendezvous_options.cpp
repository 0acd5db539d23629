// The options of --help's "Rendezvous" group: the store, the addresses, authentication, restarts.
#include <string>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "cli_options.hpp"
#include "core/defaults.hpp"

namespace ddprun::launcher {

namespace {

// Where and when the agents meet.
void add_meeting_options(CLI::App& app, core::Options& o, const std::string& g) {
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", o.rdzv_endpoint,
                 "HOST:PORT of the store served by node rank 0 (default in a Slurm step: its first node, "
                 "with the first port srun --resv-ports reserved, else a port derived from JOBID.STEPID, a "
                 "self-launch's from the job id, or a fallback when busy; outside Slurm port 29400). HOST:0 "
                 "on node rank 0 outside Slurm: a free port, printed for the other agents")
      ->group(g);
  app.add_option("--rdzv-id,--rdzv_id", o.rdzv_id,
                 "Run id shared by all agents (default: the Slurm step's JOBID.STEPID; for a self-launch "
                 "from a batch script or salloc shell, the job id; else none)")
      ->group(g);
  app.add_option(
         "--rdzv-timeout,--rdzv_timeout", o.rdzv_timeout,
         fmt::format("Seconds to wait for all nodes to join (default {})", core::kDefaultRdzvTimeout.count()))
      ->group(g);
  app.add_option(
         "--rdzv-last-call", o.last_call,
         fmt::format("With --nnodes MIN:MAX, seconds to wait for more nodes once MIN joined (default {})",
                     core::kDefaultLastCall.count()))
      ->group(g);
}

// The addresses each node advertises and the workers' MASTER_ADDR:MASTER_PORT.
void add_address_options(CLI::App& app, core::Options& o, const std::string& g) {
  app.add_option(
         "--master-addr,--master_addr", o.master_addr,
         "MASTER_ADDR for the workers (default: node 0's --rdzv-iface or --local-addr address, else the "
         "rendezvous host, else the first node)")
      ->group(g);
  app.add_option("--rdzv-iface", o.rdzv_iface,
                 "Network interface (e.g. ib0) whose address each node advertises: the other agents and "
                 "the workers reach this node there, node 0's is MASTER_ADDR and the workers' store's "
                 "address (IPv4 first, else a global IPv6); each node looks up its own. The agents still "
                 "reach the rendezvous store at --rdzv-endpoint (under Slurm: the first node's host name)")
      ->type_name("IFACE")
      ->group(g);
  app.add_option("--local-addr,--local_addr", o.local_addr,
                 "torchrun's: this node's address (or host name) to advertise, as --rdzv-iface's address "
                 "would be; not with --rdzv-iface, nor in a batch script (one address for every node)")
      ->type_name("ADDR")
      ->group(g);
  app.add_option("--master-port,--master_port", o.master_port,
                 "MASTER_PORT, the workers' store (default: the second port srun --resv-ports reserved, "
                 "else derived from the Slurm step's JOBID.STEPID, a self-launch's from the job id, else "
                 "29500; a busy reserved or derived port is replaced by a free one; held against other "
                 "ddprun jobs on this machine)")
      ->group(g);
}

// Who serves the workers' store, how node ranks are numbered, torchrun's ignored backend options.
void add_worker_store_options(CLI::App& app, core::Options& o, const std::string& g) {
  one_of(
      app.add_option("--worker-store", o.worker_store,
                     "Who serves the workers' store (init_process_group's TCPStore): agent (default: node "
                     "0's agent on MASTER_PORT for the whole attempt, TORCHELASTIC_USE_AGENT_STORE=True), "
                     "rank0 (worker rank 0 hosts torch's own), or relay (each other node's agent serves its "
                     "workers on 127.0.0.1 and forwards to node 0's: for the largest jobs)"),
      {"agent", "rank0", "relay"})
      ->group(g);
  one_of(app.add_option("--worker-store-legacy", o.worker_store_legacy,
                        "How the workers' store reads clients that send no VALIDATE: 1 (default: as torch "
                        "1.x-2.0 until one sends an op only 2.1 has) or 2.1 (as torch 2.1 from the start)"),
         {"1", "2.1"})
      ->group(g);
  one_of(
      app.add_option("--rank-order", o.rank_order,
                     "How node ranks are numbered: slurm (default: SLURM_NODEID, --node-rank) or topology "
                     "(node 0 orders the nodes by each one's SLURM_TOPOLOGY_ADDR, so that consecutive node "
                     "ranks share a switch or block: its own first, Slurm's order within each, nodes "
                     "without one last; a lost node's standby comes from its switch or block when one is "
                     "free; node 0 prints the order; one agent per node only)"),
      {"slurm", "topology"})
      ->group(g);
  ignored<std::string>(app, "--rdzv-backend,--rdzv_backend", "Accepted for torchrun compatibility; ignored",
                       g);
  ignored<std::string>(app, "--rdzv-conf,--rdzv_conf", "Accepted for torchrun compatibility; ignored", g);
}

}  // namespace

void add_store_options(CLI::App& app, core::Options& o) {
  const std::string g = "Rendezvous";
  add_meeting_options(app, o, g);
  add_address_options(app, o, g);
  add_worker_store_options(app, o, g);
}

void add_auth_options(CLI::App& app, core::Options& o) {
  const std::string g = "Rendezvous";
  one_of(
      app.add_option("--rdzv-auth", o.rdzv_auth,
                     "Who may join the store: auto (MUNGE if munged runs, found as Slurm finds it, else a "
                     "token if given; under Slurm never open: a per-job token from self-launch, else an "
                     "error; outside Slurm none, with a warning), munge, token, or none; same on every node; "
                     "a standalone run opens no store and checks none (see docs/security.md)"),
      {"auto", "munge", "token", "none"})
      ->group(g);
  app.add_option("--rdzv-token-file", o.rdzv_token_file,
                 "File (mode 0600, yours) holding the shared secret for --rdzv-auth token; "
                 "or set DDPRUN_TOKEN")
      ->group(g)
      ->type_name("PATH");
  app.add_option("--max-restarts,--max_restarts", o.max_restarts,
                 "Restart the whole job up to N times after a failure (default 0; never once a stopping "
                 "signal came: scancel, a time limit, Ctrl-C); also after a lost node, while MIN nodes are "
                 "left, standbys included (elastic)")
      ->group(g);
  app.add_option("--max-restarts-without-progress", o.max_restarts_without_progress,
                 "Stop restarting after K restarts in a row whose workers reached no higher step (written "
                 "to DDPRUN_HEARTBEAT_FILE) than before (a lost node's attempt does not count); exit 123 "
                 "(default off)")
      ->group(g)
      ->type_name("K");
  app.add_option("--requeue-on", o.requeue_on,
                 "In a batch script (plain ddprun, self-launch): when the job ends with one of these exit "
                 "codes, run scontrol requeue for it, at most --max-requeues times, never after a scancel "
                 "(e.g. 140,143,200-210; default off)")
      ->group(g)
      ->type_name("CODES");
  app.add_option("--max-requeues", o.max_requeues,
                 "--requeue-on requeues only while SLURM_RESTART_COUNT (unset: 0) is below N (default 1)")
      ->group(g)
      ->type_name("N");
}

}  // namespace ddprun::launcher
