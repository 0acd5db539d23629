#include "core/config.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/checks.hpp"
#include "core/hostlist.hpp"
#include "core/node_count.hpp"
#include "core/requeue.hpp"

namespace ddprun::core {

namespace {

std::optional<std::string> env_get(const EnvSnapshot& env, const char* name) {
  auto it = env.find(name);
  if (it == env.end()) return std::nullopt;
  return it->second;
}

// A worker of ddprun or torchrun starting ddprun: it would meet its parent's Slurm step and ports,
// and fail later with confusing port or node-rank errors.
void refuse_nested(const EnvSnapshot& env) {
  const auto run = env.find("TORCHELASTIC_RUN_ID");
  if (run == env.end() || !env.contains("LOCAL_RANK") || !env.contains("GROUP_RANK")) return;
  const auto rank = env.find("RANK");
  throw Error(
      fmt::format("ddprun is running inside a worker of another launch (TORCHELASTIC_RUN_ID={}, RANK={}): "
                  "launchers do not nest; run the command directly, or start a separate job outside "
                  "the workers",
                  run->second, rank == env.end() ? "?" : rank->second));
}

}  // namespace

namespace {

using Endpoint = std::pair<std::string, std::optional<std::uint16_t>>;

// What the context tells about the job's nodes: the hosts by node rank (empty outside Slurm), the tasks
// per node (per-task mode) and the ports derived from the Slurm step or job.
struct Layout {
  std::vector<std::string> hosts;
  std::vector<int> tasks;
  std::optional<DerivedPorts> derived;
  std::string derived_from;               // the id the ports come from (JOBID.STEPID, or the job id)
  std::optional<ReservedPorts> reserved;  // srun --resv-ports: these beat the derived ports
};

}  // namespace

namespace {

// --health-check: a failed check is a node failure (exit 125, "fix the node"), which a site may drain
// the node for: a typo must be a usage error instead.
void check_health_check(const Options& o) {
  const double t = o.health_check_timeout;
  if (!(t >= kMinHealthCheckTimeout && t <= kMaxHealthCheckTimeout)) {
    throw Error(fmt::format(
        "{} must be a number of seconds from {:g} to {:g} (e.g. 60): a shorter one fails healthy nodes",
        given_as(o, "--health-check-timeout", fmt::format("{:g}", t)), kMinHealthCheckTimeout,
        kMaxHealthCheckTimeout));
  }
  if (!o.health_check) return;
  const std::string& cmd = *o.health_check;
  const auto first = cmd.find_first_not_of(" \t\n");
  if (first == std::string::npos) {
    throw Error(
        fmt::format("{} is empty (an unset variable?): give the check's command, or leave "
                    "--health-check out",
                    given_as(o, "--health-check", fmt::format("'{}'", cmd))));
  }
  if (cmd[first] == '-') {
    throw Error(fmt::format(
        "{} looks like an option, not a command: --health-check takes the next word as its command; give "
        "the command right after it, quoted when it has arguments (--health-check 'CMD ARGS')",
        given_as(o, "--health-check", fmt::format("'{}'", cmd))));
  }
}

void check_numbers(const Options& o) {
  if (o.max_restarts && *o.max_restarts < 0) {
    throw Error(fmt::format("--max-restarts {} is negative; give 0 or more", *o.max_restarts));
  }
  if (o.gpus_per_proc) {
    if (auto e = gpus_per_proc_error(*o.gpus_per_proc)) throw Error(*e);
  }
  if (o.procs_per_replica) {
    if (auto e = procs_per_replica_error(*o.procs_per_replica)) throw Error(*e);
  }
  if (o.rdzv_timeout && !(*o.rdzv_timeout > 0)) {
    throw Error(fmt::format("--rdzv-timeout {} must be a positive number of seconds", *o.rdzv_timeout));
  }
  if (o.max_restarts_without_progress && *o.max_restarts_without_progress < 1) {
    throw Error(
        fmt::format("--max-restarts-without-progress {} must be at least 1 (leave it out for no limit)",
                    *o.max_restarts_without_progress));
  }
  if (o.max_requeues < 0) {
    throw Error(fmt::format("--max-requeues {} is negative; give 0 or more", o.max_requeues));
  }
  if (auto e = term_timeout_error(o.term_timeout)) throw Error(*e);
  if (o.hang_timeout) {
    if (auto e = hang_timeout_error(*o.hang_timeout)) throw Error(*e);
  }
  check_health_check(o);
}

// The job's fixed settings from the options and the environment.
void fill_job_settings(const Options& o, const EnvSnapshot& env, const SlurmEnv& s, Resolved& r) {
  if (o.rdzv_timeout) r.rdzv_timeout = *o.rdzv_timeout;
  r.rdzv_auth = o.rdzv_auth;
  r.rdzv_token_file = o.rdzv_token_file;
  if (o.last_call) r.last_call = *o.last_call;
  JobSpec& job = r.job;
  job.gpus_per_proc = o.gpus_per_proc.value_or(0);
  job.procs_per_replica = o.procs_per_replica.value_or(1);
  job.max_restarts = o.max_restarts.value_or(0);
  if (o.requeue_on) r.requeue_on = parse_exit_codes(*o.requeue_on);
  r.max_requeues = o.max_requeues;
  r.health_check = o.health_check;
  r.health_check_timeout = o.health_check_timeout;
  job.role = o.role;
  r.cpu_bind = parse_cpu_bind(o.cpu_bind);
  const auto ws = parse_worker_store(o.worker_store);
  if (!ws) {
    throw Error(fmt::format("--worker-store {}: expected agent, rank0 or relay", o.worker_store));
  }
  job.worker_store = *ws;
  r.legacy_clients_21 = o.worker_store_legacy == "2.1";
  const auto order = parse_rank_order(o.rank_order);
  if (!order) throw Error(fmt::format("--rank-order {}: expected slurm or topology", o.rank_order));
  r.rank_order = *order;
  r.topology_addr = s.topology_addr.value_or("");
  job.virtual_local_rank = o.virtual_local_rank;
  job.user_omp_num_threads = env_get(env, "OMP_NUM_THREADS");
  job.user_set_nccl_async = env_get(env, "NCCL_ASYNC_ERROR_HANDLING").has_value() ||
                            env_get(env, "TORCH_NCCL_ASYNC_ERROR_HANDLING");
  job.cpus_per_task = s.cpus_per_task;
  job.requeue_count = s.restart_count.value_or(0);
}

void set_counts(const NodeCounts& c, Resolved& r) {
  r.nnodes_min = c.min;
  r.nnodes_max = c.max;
  r.job.nnodes = c.active;
  r.nagents = c.agents;
  r.elastic = c.elastic;
}

// What to do about a node rank given under Slurm, where each node's is its SLURM_NODEID.
std::string node_rank_fix(const Options& o) {
  const auto var = o.from_variable.find("--node-rank");
  if (var == o.from_variable.end()) return "drop --node-rank: Slurm numbers the nodes";
  return fmt::format("unset {}{}: Slurm numbers the nodes", var->second,
                     var->second.starts_with("PET_") ? " (left from a torchrun script?)" : "");
}

// Inside an srun step: agent mode with one task per node, else per-task mode.
Layout resolve_step(const Options& o, const EnvSnapshot& env, const SlurmEnv& s, Resolved& r) {
  JobSpec& job = r.job;
  Layout l;
  const SlurmLayout layout = slurm_layout(s);
  l.hosts = layout.hosts;
  const int n = static_cast<int>(l.hosts.size());
  // The step, not only the job: concurrent steps of one allocation must not meet each other. A self-launched
  // step keeps the job id its batch script planned with (what a dry run there shows): self-launches of one
  // allocation never run at once, each takes the whole allocation.
  const bool self_launched = env_get(env, kSelfLaunchJobVar) == *s.job_id;
  const std::string step_run = self_launched ? *s.job_id : fmt::format("{}.{}", *s.job_id, *s.step_id);
  l.derived = derive_ports(step_run);
  l.derived_from = step_run;
  // srun --resv-ports (or a cluster whose MpiParams=ports reserves ports for every step): Slurm's ports. A
  // self-launch keeps the job id's, which its batch script's dry run showed and could not know otherwise.
  if (s.resv_ports && !self_launched) {
    l.reserved = parse_reserved_ports("SLURM_STEP_RESV_PORTS", *s.resv_ports);
  }
  job.run_id = o.rdzv_id.value_or(step_run);
  // Concurrent steps given one --rdzv-id never share a store, even when one's port is another's fallback.
  r.rdzv_run_id = store_run_id(job.run_id, step_run);
  if (layout.num_tasks > n) {
    // srun started more tasks than nodes: every ddprun of the step is exactly one worker.
    r.mode = Mode::per_task;
    if (o.nproc_per_node) {
      throw Error(
          fmt::format("--nproc-per-node {} cannot be used here: srun started {} tasks on {} nodes, so each "
                      "ddprun is one worker; drop --nproc-per-node, or run srun --ntasks-per-node=1",
                      *o.nproc_per_node, layout.num_tasks, n));
    }
    if (!s.proc_id || !s.local_id || !s.node_id) {
      throw Error("per-task mode needs SLURM_PROCID, SLURM_LOCALID and SLURM_NODEID; run ddprun under srun");
    }
    l.tasks = layout.tasks_per_node;
    if (l.tasks.empty()) throw Error("per-task mode needs SLURM_STEP_TASKS_PER_NODE; run ddprun under srun");
    job.task_rank = *s.proc_id;
    job.task_local_rank = *s.local_id;
  } else {
    r.mode = Mode::agent;
  }
  const std::string what = fmt::format("the Slurm step ({}='{}')", s.nodelist->var, s.nodelist->value);
  // Per-task mode has no standbys: each ddprun is a worker.
  const NodeCounts c = r.mode == Mode::per_task ? step_counts(o.nnodes, n, 0, what)
                                                : step_counts(o.nnodes, n, job.max_restarts, what);
  set_counts(c, r);
  if (o.node_rank && s.node_id && *o.node_rank != *s.node_id) {
    // This node's error (resolve_node throws it): told to the others as node rank SLURM_NODEID.
    r.node_rank_error = fmt::format(
        "{} disagrees with SLURM_NODEID={} of this node: under Slurm each node's rank is its SLURM_NODEID, "
        "and a node rank set once for the job reaches every node's ddprun, which would all claim it; {}",
        given_as(o, "--node-rank", std::to_string(*o.node_rank)), *s.node_id, node_rank_fix(o));
    job.node_rank = *s.node_id;
    return l;
  }
  job.node_rank = o.node_rank.value_or(s.node_id.value_or(0));
  return l;
}

// A batch script or salloc shell: the plan is what self-launch on the allocation would run.
Layout resolve_batch(const Options& o, const SlurmEnv& s, Resolved& r) {
  JobSpec& job = r.job;
  Layout l;
  l.hosts = slurm_layout(s).hosts;
  const NodeCounts c = batch_counts(o.nnodes, static_cast<int>(l.hosts.size()), job.max_restarts,
                                    fmt::format("{}='{}'", s.nodelist->var, s.nodelist->value));
  set_counts(c, r);
  // Every node's agent gets this script's options and environment; its node rank is its SLURM_NODEID.
  if (o.node_rank && (c.agents > 1 || *o.node_rank != 0)) {
    throw Error(fmt::format(
        "{} would reach the agent on every node this batch script starts ddprun on ({} node{}), and each "
        "takes its node rank from its own SLURM_NODEID; {}",
        given_as(o, "--node-rank", std::to_string(*o.node_rank)), c.agents, c.agents == 1 ? "" : "s",
        node_rank_fix(o)));
  }
  r.het_components = static_cast<int>(s.het_nodelists.size());
  if (r.het_components >= 2 && static_cast<std::size_t>(c.agents) < l.hosts.size()) {
    // One srun over the components starts an agent on each of their nodes; it cannot leave some out.
    throw Error(fmt::format(
        "this heterogeneous job has {} nodes in {} components and ddprun starts an agent on each, "
        "but --nnodes {} asks for {}; drop --nnodes, or start the agents yourself with srun "
        "--het-group=... -N... ddprun",
        l.hosts.size(), r.het_components, o.nnodes.value_or(""), c.agents));
  }
  l.hosts.resize(static_cast<std::size_t>(c.agents));  // fail-fast: MAX of them; elastic: all
  r.allocation_hosts = l.hosts;
  r.mode = Mode::agent;
  l.derived = derive_ports(*s.job_id);
  l.derived_from = *s.job_id;
  job.run_id = o.rdzv_id.value_or(*s.job_id);
  job.node_rank = 0;
  return l;
}

// No Slurm: torchrun-style flags, standalone on one node.
Layout resolve_outside(const Options& o, const std::optional<Endpoint>& endpoint, Resolved& r) {
  JobSpec& job = r.job;
  const NodeCounts c = outside_counts(o.nnodes, o.node_rank, job.max_restarts);
  if (o.standalone && c.agents > 1) {
    const std::string why = c.max > 1 ? fmt::format("--nnodes is {}", *o.nnodes)
                                      : fmt::format("--node-rank {} makes this a standby", *o.node_rank);
    throw Error(fmt::format("--standalone runs on one node but {}; drop one of them", why));
  }
  set_counts(c, r);
  const int agents = c.agents;  // a standby (--node-rank beyond MAX) is one node of several too
  job.run_id = o.rdzv_id.value_or(kNoRunId);
  if (agents > 1 && !o.node_rank) {
    throw Error(
        fmt::format("--nnodes {} outside Slurm needs --node-rank on every node (0 on the one that serves the "
                    "rendezvous store)",
                    *o.nnodes));
  }
  if (agents > 1 && !endpoint && !o.master_addr) {
    throw Error(
        fmt::format("--nnodes {} outside Slurm needs --rdzv-endpoint HOST:PORT (or --master-addr) naming "
                    "the node-rank-0 host",
                    o.nnodes.value_or("1")));
  }
  job.node_rank = o.node_rank.value_or(0);
  r.mode = agents > 1 ? Mode::agent : Mode::standalone;
  return {};
}

// --rdzv-endpoint HOST:0: node 0 binds a free port and prints it (launcher), so only an agent
// started by hand as node rank 0 can take it; every other agent must be given the printed port, and
// agents that start together (an srun step, a self-launch) could not learn it. One agent opens no store.
void check_free_store_port(const std::optional<Endpoint>& endpoint, const Resolved& r) {
  if (!endpoint || endpoint->second != 0 || r.mode == Mode::standalone) return;
  if (r.context != SlurmContext::none || r.mode != Mode::agent) {
    throw Error(
        "--rdzv-endpoint HOST:0 (a free port node 0 prints) is for agents started by hand: under Slurm "
        "they start together and could not learn it; give a port, or drop the port to use the step's");
  }
  if (r.job.node_rank != 0) {
    throw Error(fmt::format(
        "--rdzv-endpoint {}:0 lets only node 0 (node rank 0) pick a free port; give node rank {} the "
        "port node 0 printed ('rendezvous store listening on HOST:PORT')",
        endpoint->first, r.job.node_rank));
  }
}

// MASTER_ADDR, the store's endpoint and MASTER_PORT.
void resolve_addresses(const Options& o, const std::optional<Endpoint>& endpoint, const Layout& l,
                       Resolved& r) {
  JobSpec& job = r.job;
  std::optional<std::uint16_t> master_port_flag;
  if (o.master_port) master_port_flag = parse_port("--master-port", *o.master_port);
  // MASTER_ADDR: flag, else the rendezvous host, else the first host of the step, else loopback.
  if (o.master_addr) {
    job.master_addr = *o.master_addr;
  } else if (endpoint) {
    job.master_addr = endpoint->first;
  } else if (!l.hosts.empty()) {
    job.master_addr = l.hosts.front();
  } else {
    job.master_addr = "127.0.0.1";
  }
  // Store endpoint: --rdzv-endpoint, else node 0 host with a derived (Slurm) or default port.
  r.rdzv_host = endpoint ? endpoint->first : job.master_addr;
  if (endpoint && endpoint->second) {
    r.rdzv_port = *endpoint->second;
  } else if (l.reserved) {
    r.rdzv_port = l.reserved->store;  // Slurm keeps it for this step alone: no fallbacks needed
  } else if (l.derived) {
    r.rdzv_port = l.derived->store;
    r.rdzv_fallback_ports = store_port_fallbacks(l.derived_from);
  } else if (r.mode == Mode::standalone) {
    r.rdzv_port = 0;  // no store: nobody else needs to find one
  } else {
    r.rdzv_port = kDefaultStorePort;
  }
  check_free_store_port(endpoint, r);
  r.master_port_given = master_port_flag.has_value();
  if (master_port_flag) {
    job.master_port = *master_port_flag;
    if (job.master_port == r.rdzv_port) {
      throw Error(
          fmt::format("--master-port {} is the rendezvous store's port; the workers' store needs its own",
                      job.master_port));
    }
  } else if (l.reserved && l.reserved->master && *l.reserved->master != r.rdzv_port) {
    job.master_port = *l.reserved->master;
  } else {
    job.master_port = l.derived ? l.derived->master : kDefaultMasterPort;
    if (job.master_port == r.rdzv_port) ++job.master_port;
  }
}

// --rdzv-iface / --local-addr: which one, and where it cannot apply. The interface's address is looked
// up by the launcher on each node (launcher/system.hpp), never in a batch script's shell.
void resolve_local_addr(const Options& o, Resolved& r) {
  r.master_addr_given = o.master_addr.has_value();
  r.rdzv_iface = o.rdzv_iface;
  if (o.rdzv_iface && o.local_addr) {
    throw Error(fmt::format("--rdzv-iface {} and --local-addr {} both choose this node's address; give one",
                            *o.rdzv_iface, *o.local_addr));
  }
  if (o.rdzv_iface && o.rdzv_iface->empty())
    throw Error("--rdzv-iface is empty; name an interface, e.g. ib0");
  if (o.rdzv_iface) r.addr_option = given_as(o, "--rdzv-iface", *o.rdzv_iface);
  if (!o.local_addr) return;
  r.addr_option = given_as(o, "--local-addr", *o.local_addr);
  if (o.local_addr->empty()) throw Error("--local-addr is empty; give this node's address or host name");
  if (r.context == SlurmContext::batch) {
    throw Error(fmt::format(
        "--local-addr {} names one node's address, but this batch script re-launches ddprun on every node; "
        "use --rdzv-iface IFACE, which each node resolves to its own address",
        *o.local_addr));
  }
  set_local_addr(r, *o.local_addr);
}

void check_gpu_slices(const JobSpec& job, const std::vector<std::string>& gpus) {
  if (gpus.empty()) {
    throw Error(
        fmt::format("--gpus-per-proc {} but no GPUs are visible (CUDA_VISIBLE_DEVICES, SLURM_STEP_GPUS, "
                    "SLURM_JOB_GPUS); ask Slurm for GPUs or drop --gpus-per-proc",
                    job.gpus_per_proc));
  }
  if (gpus.size() % static_cast<std::size_t>(job.gpus_per_proc) != 0) {
    throw Error(
        fmt::format("{} visible GPUs are not divisible by --gpus-per-proc {}; choose a G that divides them",
                    gpus.size(), job.gpus_per_proc));
  }
}

// Workers on this node (outside per-task mode).
int local_workers(const Options& o, const SlurmEnv& s, const SystemInfo& sys,
                  const std::vector<std::string>& gpus, const Resolved& r) {
  // `cpu` counts the CPUs the job may use here: Slurm's allocation on this node when it says, never
  // more than this process's affinity (the cgroup cpuset).
  const int cpus = s.cpus_on_node ? std::min(sys.cpu_count, *s.cpus_on_node) : sys.cpu_count;
  // A batch script or salloc shell runs where no GPU variables are set (the submit host, or the
  // batch node outside any step): GPU counts, and the checks that need them, come from the nodes
  // after self-launch. The plan shown here assumes one worker per node for `gpu`.
  return r.gpus_on_nodes && o.nproc_per_node == "gpu"
             ? 1
             : resolve_nproc(o.nproc_per_node, gpus, r.job.gpus_per_proc, cpus);
}

// Every node's shape. Other nodes are assumed to look like this one (dry-run); the rendezvous later
// replaces the assumption with what each agent reports.
void assume_nodes(int local, const std::vector<std::string>& gpus, const SystemInfo& sys, Resolved& r) {
  const JobSpec& job = r.job;
  const GpuList shared(gpus);  // one list for every node, not a copy each (16,384 nodes x 8 GPUs)
  r.nodes.reserve(static_cast<std::size_t>(r.nagents));
  for (int i = 0; i < r.nagents; ++i) {
    NodeSpec ns;
    ns.node_rank = i;
    ns.standby = i >= job.nnodes;  // standbys follow the active nodes
    if (!r.hosts.empty()) {
      ns.host = std::move(r.hosts[static_cast<std::size_t>(i)]);
    } else if (i == job.node_rank) {
      ns.host = sys.hostname;
    }
    ns.local_world_size = r.mode == Mode::per_task ? r.tasks_per_node[static_cast<std::size_t>(i)] : local;
    ns.gpus = shared;
    r.nodes.push_back(std::move(ns));
  }
  r.self = r.nodes[static_cast<std::size_t>(job.node_rank)];
  std::vector<std::string>().swap(r.hosts);  // moved into the nodes
}

}  // namespace

void set_local_addr(Resolved& r, const std::string& addr) {
  r.local_addr = addr;
  if (r.job.node_rank == 0 && !r.master_addr_given) r.job.master_addr = addr;
}

Resolved resolve_job(const Options& o, const EnvSnapshot& env, const SystemInfo& sys) {
  refuse_nested(env);
  Resolved r;
  const SlurmEnv s = read_slurm_env(env);
  r.context = o.standalone ? SlurmContext::none : s.context;
  check_numbers(o);
  r.command_spec = command_spec(o);
  r.command = build_argv(r.command_spec);
  if (o.local_ranks_filter) r.local_ranks_filter = parse_rank_filter(*o.local_ranks_filter);
  if (o.master_port) parse_port("--master-port", *o.master_port);  // a bad port before the layout's errors
  std::optional<Endpoint> endpoint;
  if (o.rdzv_endpoint) endpoint = parse_endpoint("--rdzv-endpoint", *o.rdzv_endpoint);
  fill_job_settings(o, env, s, r);

  Layout l = r.context == SlurmContext::step    ? resolve_step(o, env, s, r)
             : r.context == SlurmContext::batch ? resolve_batch(o, s, r)
                                                : resolve_outside(o, endpoint, r);
  JobSpec& job = r.job;
  if (job.node_rank >= r.nagents) {
    throw Error(fmt::format(
        "--node-rank {} is not below the number of nodes {}; node ranks run 0..{} (a standby beyond MAX "
        "needs --max-restarts)",
        job.node_rank, r.nagents, r.nagents - 1));
  }
  job.mode = r.mode;
  if (r.rdzv_run_id.empty()) r.rdzv_run_id = job.run_id;
  if (r.rank_order == RankOrder::topology && r.mode == Mode::per_task) {
    throw Error(
        "--rank-order topology needs one ddprun per node (agent mode); under srun --ntasks-per-node=K each "
        "ddprun is one worker whose rank is its SLURM_PROCID: run one task per node, or drop --rank-order");
  }
  if (job.worker_store == WorkerStore::relay && r.mode == Mode::per_task) {
    throw Error(
        "--worker-store relay needs one ddprun per node (agent mode); under srun --ntasks-per-node=K each "
        "ddprun is one worker: use --worker-store agent");
  }
  resolve_addresses(o, endpoint, l, r);
  resolve_local_addr(o, r);
  r.self.node_rank = job.node_rank;
  if (!l.hosts.empty()) {
    r.self.host = l.hosts[static_cast<std::size_t>(job.node_rank)];
  } else {
    r.self.host = sys.hostname;
  }
  r.hosts = std::move(l.hosts);
  r.tasks_per_node = std::move(l.tasks);
  return r;
}

void resolve_node(const Options& o, const EnvSnapshot& env, const SystemInfo& sys, Resolved& r) {
  if (r.node_rank_error) throw Error(*r.node_rank_error);
  const SlurmEnv s = read_slurm_env(env);
  const std::vector<std::string> gpus = visible_gpus(s, sys.probed_gpus);
  const JobSpec& job = r.job;
  // A heterogeneous job's batch shell sees component 0's GPUs (or its node's devices) at most.
  r.gpus_on_nodes = r.context == SlurmContext::batch && (gpus.empty() || r.het_components >= 2);
  const int local = r.mode == Mode::per_task ? r.tasks_per_node[static_cast<std::size_t>(job.node_rank)]
                                             : local_workers(o, s, sys, gpus, r);
  if (job.gpus_per_proc > 0 && r.mode != Mode::per_task && !r.gpus_on_nodes) check_gpu_slices(job, gpus);
  assume_nodes(local, gpus, sys, r);
}

Resolved resolve(const Options& o, const EnvSnapshot& env, const SystemInfo& sys) {
  Resolved r = resolve_job(o, env, sys);
  resolve_node(o, env, sys, r);
  return r;
}

}  // namespace ddprun::core
