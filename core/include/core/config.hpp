#pragma once
// Config resolution: flags beat DDPRUN_* variables (both arrive in Options), which beat Slurm, which
// beats defaults. Pure: the environment and the machine facts come in as values.
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/command.hpp"
#include "core/cpu_bind.hpp"
#include "core/defaults.hpp"
#include "core/node_count.hpp"
#include "core/plan.hpp"
#include "core/rank_order.hpp"
#include "core/slurm_env.hpp"

namespace ddprun::core {

// Everything the command line (or its DDPRUN_* variables) can say; unset means "not given". The CLI
// checks the fields with a fixed set of values (rdzv_auth, log_format, format) against that set.
struct Options {
  std::optional<std::string> nnodes;          // N or MIN:MAX
  std::optional<std::string> nproc_per_node;  // N | gpu | cpu | auto
  std::optional<int> node_rank;
  std::optional<std::string> rdzv_endpoint;  // HOST[:PORT]
  std::optional<std::string> rdzv_id;
  std::optional<double> rdzv_timeout;  // seconds
  std::optional<double> last_call;     // seconds, for MIN:MAX
  std::optional<std::string> master_addr;
  std::optional<std::string> master_port;  // kept as text so a bad value gets our message
  // This node's address for the other nodes and the workers: an interface's (--rdzv-iface, looked up by
  // the launcher) or given (--local-addr, torchrun's); at most one of them.
  std::optional<std::string> rdzv_iface;
  std::optional<std::string> local_addr;
  bool standalone = false;
  std::optional<int> max_restarts;
  std::optional<int> max_restarts_without_progress;  // restarts in a row without a higher step; unset: off
  std::optional<std::string> requeue_on;             // exit codes that requeue a batch job: "140,143,200-210"
  int max_requeues = 1;                              // requeues of the job (SLURM_RESTART_COUNT) at most
  std::string rdzv_auth = "auto";                    // auto | munge | token | none (docs/security.md)
  std::optional<std::string> rdzv_token_file;        // shared secret file, mode 0600
  std::optional<int> gpus_per_proc;
  bool virtual_local_rank = false;  // torchrun 2.x: LOCAL_RANK=0, CUDA_VISIBLE_DEVICES only its own GPUs
  std::optional<int> procs_per_replica;
  std::string role = "default";
  std::optional<std::string> start_method;  // torchrun's --start_method: checked, ignored
  std::string cpu_bind = "none";            // none | cores | numa | gpu (core/cpu_bind.hpp)
  std::string worker_store = "agent";       // agent | rank0 | relay (core/worker_store.hpp)
  std::string worker_store_legacy = "1";    // 1 | 2.1: clients without VALIDATE (docs/protocol.md)
  std::string rank_order = "slurm";         // slurm | topology (core/rank_order.hpp)

  // How to run the command.
  std::vector<std::string> command;
  bool module = false;     // -m MODULE
  bool no_python = false;  // --no-python
  bool run_path = false;   // torchrun's --run_path: accepted, overrides --no-python
  std::string python = "python3";
  std::string local_rank_arg = "none";  // none | underscore | dash: torch.distributed.launch's --local_rank

  // Supervision and logs (used by the agent).
  double term_timeout = static_cast<double>(kDefaultTermTimeout.count());
  std::optional<double> hang_timeout;       // seconds without progress before a rank is hung; unset: off
  std::optional<std::string> health_check;  // sh -c command each agent runs before each round
  double health_check_timeout = 60.0;
  std::optional<int> metrics_port;  // --metrics-port: Prometheus text over HTTP (docs/observe.md)
  bool metrics_all_nodes = false;   // every node serves its own ranks, not only node 0 the job's
  std::optional<std::string> prefix;
  bool no_prefix = false;
  bool tee = false;
  std::optional<std::string> log_dir;
  std::optional<std::string> local_ranks_filter;
  std::optional<std::string> error_file;
  bool quiet = false;
  bool verbose = false;             // several nodes: every node prints its own report, not node 0 alone
  std::string log_format = "text";  // ddprun's own messages: text or json (one event per line)

  // Modes of the CLI itself.
  bool dry_run = false;
  std::string format = "text";  // dry-run output: text or json

  // The options whose value came from an environment variable rather than the command line: the
  // option's first long name ("--node-rank") -> that variable ("DDPRUN_NODE_RANK", "PET_NODE_RANK").
  // Messages name what the user set (given_as).
  std::map<std::string, std::string> from_variable;

  bool operator==(const Options&) const = default;
};

// How `option` got `value`, for messages: "DDPRUN_NODE_RANK=1" from a variable, else "--node-rank 1".
std::string given_as(const Options& o, const std::string& option, const std::string& value);

// Facts about this machine that resolution needs (probed by the caller).
struct SystemInfo {
  std::string hostname = "localhost";
  int cpu_count = 1;                     // CPUs this process may run on
  std::vector<std::string> probed_gpus;  // from /dev/nvidiaN when nothing else says
};

struct Resolved {
  Mode mode = Mode::standalone;
  SlurmContext context = SlurmContext::none;
  JobSpec job;
  std::vector<NodeSpec> nodes;  // assumed layout of every agent (dry-run); real one comes from rendezvous
  NodeSpec self;                // this node (resolve_job: its node rank and host only)
  // resolve_job: the hosts by node rank (empty outside Slurm) and, in per-task mode, the tasks per node;
  // resolve_node moves the hosts into `nodes`.
  std::vector<std::string> hosts;
  std::vector<int> tasks_per_node;
  // --nnodes MIN:MAX as the rendezvous uses it; fail-fast inside Slurm: both the nodes that run.
  int nnodes_min = 1;
  int nnodes_max = 1;
  // Every agent of the job, standbys included: the step's or allocation's nodes under
  // Slurm; outside it MAX, or a standby's --node-rank + 1. job.nnodes of them run workers; nodes lists
  // them all, the standbys last.
  int nagents = 1;
  bool elastic = false;  // is_elastic(nnodes_min, nnodes_max, nagents, max_restarts) (core/node_count.hpp)
  std::string rdzv_host;
  std::uint16_t rdzv_port = 0;  // 0: no store (standalone)
  // A derived store port's fallbacks (store_port_fallbacks): where node 0 serves when rdzv_port is
  // busy on its node, and where the others look for it. Empty when the port was given.
  std::vector<std::uint16_t> rdzv_fallback_ports;
  // The run id the store's handshake checks: job.run_id, with the Slurm step added when --rdzv-id names
  // another, so that two steps given one --rdzv-id never meet at one store.
  std::string rdzv_run_id;
  bool master_port_given = false;  // --master-port (or DDPRUN_MASTER_PORT): busy at start is an error
  bool master_addr_given = false;  // --master-addr: no node's own address replaces it
  // The address this node advertises (set_local_addr); empty: its host name, as without the flags.
  std::string local_addr;
  std::optional<std::string> rdzv_iface;  // where local_addr comes from, for the plan's text
  // What chose this node's address, as the user gave it ("--rdzv-iface lo", "DDPRUN_RDZV_IFACE=lo",
  // "--local-addr 10.0.0.7"); empty without either.
  std::string addr_option;
  // A step's node rank given (--node-rank, DDPRUN_NODE_RANK, PET_NODE_RANK) that is not this node's
  // SLURM_NODEID: resolve_job keeps SLURM_NODEID and this line, resolve_node throws it, so that the other
  // agents learn of it as of any error of this node's instead of waiting for a node rank nobody claims.
  std::optional<std::string> node_rank_error;
  double rdzv_timeout = static_cast<double>(kDefaultRdzvTimeout.count());
  double last_call = static_cast<double>(kDefaultLastCall.count());
  std::string rdzv_auth = "auto";  // auto | munge | token | none (the store's auth::parse_policy reads it)
  std::optional<std::string> rdzv_token_file;
  std::vector<std::string> allocation_hosts;  // batch context: the hosts self-launch would use
  // --requeue-on (core/requeue.hpp), parsed; empty: off. --max-requeues.
  std::set<int> requeue_on;
  int max_requeues = 1;
  // --health-check and its timeout (run by the launcher; here for the plan's text).
  std::optional<std::string> health_check;
  double health_check_timeout = 60.0;
  int het_components = 0;      // batch context of a heterogeneous job: self-launch runs on every component
  bool gpus_on_nodes = false;  // batch context without GPU variables: GPU counts come from the nodes
  CommandSpec command_spec;    // command_spec(options)
  std::vector<std::string> command;  // final argv: build_argv(command_spec); per worker: worker_argv
  std::optional<std::set<int>> local_ranks_filter;
  CpuBind cpu_bind = CpuBind::none;  // applied by each agent to its own workers (agent/topology.hpp)
  // --rank-order: topology lets node 0 order the node ranks by each agent's SLURM_TOPOLOGY_ADDR, which
  // travels in its join record (docs/slurm.md, "Topology-aware node ranks").
  RankOrder rank_order = RankOrder::slurm;
  std::string topology_addr;       // this node's SLURM_TOPOLOGY_ADDR, "" when unset
  bool legacy_clients_21 = false;  // --worker-store-legacy 2.1: clients without VALIDATE are torch 2.1's
};

// Deterministic ports for a Slurm step ("JOBID.STEPID"; a batch context plans with the job id): every
// node derives the same pair without talking, and two steps or jobs sharing a node rarely collide. Range
// 20000-32767 stays below Linux's ephemeral ports.
struct DerivedPorts {
  std::uint16_t store;
  std::uint16_t master;
};
DerivedPorts derive_ports(const std::string& job_id);
// Where the store goes when derive_ports(job_id).store is busy on node 0 (another step's
// store that derived the same port, any program): kStorePortFallbacks distinct even ports of the same
// range, none of them the first, the same on every node.
inline constexpr std::size_t kStorePortFallbacks = 7;
std::vector<std::uint16_t> store_port_fallbacks(const std::string& job_id);

// The ports srun --resv-ports reserved for the step (SLURM_STEP_RESV_PORTS: single ports and ranges,
// comma-separated, e.g. "12000-12003" or "12000,12002"), the same on every node of the step. The store
// takes the first; MASTER_PORT the second, or the derived one when Slurm reserved a single port.
struct ReservedPorts {
  std::uint16_t store;
  std::optional<std::uint16_t> master;
};
// nullopt for an empty value (no ports reserved); throws Error naming `var` on a malformed one. Pure.
std::optional<ReservedPorts> parse_reserved_ports(const std::string& var, const std::string& value);

// The run id a Slurm step's store checks: the step's own (JOBID.STEPID, or JOBID when self-launched), or
// "ID (step STEP_RUN)" for a job started with --rdzv-id ID, so that two steps given one id never meet.
std::string store_run_id(const std::string& run_id, const std::string& step_run);

// Set by a self-launch in srun's environment to the job id: the step then plans with the job id as its run
// id and the source of its ports, as the batch script's dry run did, instead of JOBID.STEPID. Each agent
// removes it from its environment before any worker starts.
inline constexpr const char* kSelfLaunchJobVar = "DDPRUN_SELF_LAUNCH_JOB";

// --health-check-timeout's bounds, in seconds: a check is a shell command, which a busy node may take
// a while to start, and its failure is reported as the node's.
inline constexpr double kMinHealthCheckTimeout = 1;
inline constexpr double kMaxHealthCheckTimeout = 86400;

inline constexpr std::uint16_t kDefaultStorePort = 29400;
inline constexpr std::uint16_t kDefaultMasterPort = 29500;

// HOST[:PORT] or [V6]:PORT; throws Error naming the option on a malformed value.
std::pair<std::string, std::optional<std::uint16_t>> parse_endpoint(const std::string& opt,
                                                                    const std::string& v);
// `lowest` 0 lets HOST:0 through (--rdzv-endpoint: node 0 binds a free port, check_free_store_port).
std::uint16_t parse_port(const std::string& opt, const std::string& v, int lowest = 1);
std::pair<int, int> parse_nnodes(const std::string& v);
std::set<int> parse_rank_filter(const std::string& v);

// How COMMAND runs (the user's words); build_argv(command_spec(o)) is what the workers execute.
CommandSpec command_spec(const Options& o);

// resolve_job, then resolve_node. resolve_job decides what every node of the job shares (mode, node
// counts, this node's rank, run id, ports, the store's endpoint); resolve_node what this node alone can
// check (its GPUs and workers, --gpus-per-proc) and the assumed layout. An error of resolve_node is
// this node's, which the others can learn of through the store (docs/rendezvous.md, "Start-up errors").
Resolved resolve(const Options& o, const EnvSnapshot& env, const SystemInfo& sys);
// This node advertises `addr` (--local-addr, or --rdzv-iface's address): node rank 0's becomes
// MASTER_ADDR unless --master-addr was given; the other nodes learn it from the published plan.
void set_local_addr(Resolved& r, const std::string& addr);
Resolved resolve_job(const Options& o, const EnvSnapshot& env, const SystemInfo& sys);
void resolve_node(const Options& o, const EnvSnapshot& env, const SystemInfo& sys, Resolved& r);

}  // namespace ddprun::core
