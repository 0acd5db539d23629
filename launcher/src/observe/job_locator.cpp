#include "launcher/observe/job_locator.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <utility>
#include <vector>

#include "agent/run_command.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "core/hostlist.hpp"
#include "core/slurm_text.hpp"
#include "launcher/auth_setup.hpp"
#include "probe.hpp"
#include "store/client.hpp"
#include "store/error.hpp"
#include "store_search.hpp"

namespace ddprun::launcher {

std::string JobTarget::endpoint() const {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port)
                                             : fmt::format("{}:{}", host, port);
}

std::string JobTarget::describe() const {
  if (!addr.empty() && addr != host) return fmt::format("{} (at {}, --rdzv-id {})", endpoint(), addr, run_id);
  return fmt::format("{} (--rdzv-id {})", endpoint(), run_id);
}

JobTarget locate_job(const JobQuery& q) {
  if (!q.rdzv_endpoint || !q.rdzv_id) {
    throw core::Error(
        "name the job: --rdzv-endpoint HOST:PORT and --rdzv-id ID, as node 0's startup lines name them "
        "('rendezvous store HOST:PORT, run id ...'), or a Slurm job with --job JOBID (inside an allocation, "
        "SLURM_JOB_ID)");
  }
  const auto [host, port] = core::parse_endpoint("--rdzv-endpoint", *q.rdzv_endpoint);
  JobTarget t;
  t.host = host;
  t.port = port.value_or(core::kDefaultStorePort);
  t.run_id = *q.rdzv_id;
  return t;
}

store::auth::Config observer_auth(const JobQuery& q, const core::EnvSnapshot& env) {
  std::optional<std::string> token;
  if (const auto it = env.find("DDPRUN_TOKEN"); it != env.end() && !it->second.empty()) token = it->second;
  try {
    return store::auth::resolve(store::auth::parse_policy(q.rdzv_auth), token, q.rdzv_token_file,
                                munge_socket(env));
  } catch (const store::Error& e) {
    throw core::Error(e.what());
  }
}

std::shared_ptr<store::TcpStore> connect_job(const JobTarget& t, const store::auth::Config& auth,
                                             std::chrono::milliseconds timeout) {
  try {
    return open_store(t, auth, timeout);
  } catch (const store::Error& e) {
    throw_observe_error(t, e);
  }
}

std::optional<std::string> served_run_id(const std::string& refusal, const std::string& ours) {
  static const std::string kHead = "this store serves run '";
  const std::string tail = "', the client belongs to run '" + ours + "'";
  const auto head = refusal.find(kHead);
  if (head == std::string::npos) return std::nullopt;
  const auto from = head + kHead.size();
  const auto end = refusal.find(tail, from);
  if (end == std::string::npos) return std::nullopt;
  return refusal.substr(from, end - from);
}

bool serves_step(const std::string& served, const std::string& step_run) {
  if (step_run.empty()) return false;
  const std::string suffix = " (step " + step_run + ")";
  return served == step_run || (served.size() > suffix.size() && served.ends_with(suffix));
}

std::vector<JobTarget> failover_targets(const std::vector<std::string>& hosts,
                                        const std::vector<JobTarget>& bases) {
  std::vector<JobTarget> out, masters;
  for (const auto& b : bases) {
    for (int k = 1; k <= kMaxFailovers + 1 && b.port + k <= 65535; ++k) {
      const auto port = static_cast<std::uint16_t>(b.port + k);
      for (const auto& h : hosts) {
        JobTarget t = b;
        t.host = h;
        t.addr.clear();
        t.port = port;
        (port == b.master_port ? masters : out).push_back(std::move(t));
      }
    }
  }
  out.insert(out.end(), masters.begin(), masters.end());
  return out;
}

std::map<std::string, std::string> parse_node_addrs(const std::string& text) {
  std::map<std::string, std::string> out;
  for (const std::string_view line : core::split_lines(text)) {
    const std::string_view name = core::scontrol_field(line, "NodeName").value_or("");
    const std::string_view addr = core::scontrol_field(line, "NodeAddr").value_or("");
    if (!name.empty() && !addr.empty() && addr != name && addr != "(null)")
      out[std::string(name)] = std::string(addr);
  }
  return out;
}

namespace {

// squeue and scontrol answer from slurmctld within their own MessageTimeout; this bounds one that never does.
constexpr std::chrono::milliseconds kSlurmQueryTimeout{30000};

// A Slurm command's stdout, its stderr dropped: empty when it fails (a job id Slurm no longer knows), which
// the caller words. A command that is not on PATH or does not answer is an error of its own.
std::string command_output(const std::vector<std::string>& argv) {
  agent::CommandRequest req{argv, kSlurmQueryTimeout};
  req.output_cap = 4 * 1024 * 1024;
  req.stderr_too = false;
  const agent::CommandResult r = agent::run_command(req);
  if (r.not_found) {
    throw core::Error(
        fmt::format("{} not found on PATH: the job's place comes from Slurm; run this where Slurm's "
                    "commands are, or give --rdzv-endpoint HOST:PORT and --rdzv-id ID",
                    argv.front()),
        kObserveExit);
  }
  if (r.not_started || r.timed_out) {
    throw core::Error(
        fmt::format("{} {}: is slurmctld answering?", argv.front(), agent::describe_run(r, req.timeout)),
        kObserveExit);
  }
  return r.output;
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

}  // namespace

std::vector<SlurmStep> parse_squeue_steps(const std::string& text) {
  std::vector<SlurmStep> out;
  for (const std::string_view view : core::split_lines(text)) {
    const std::string line(view);
    const auto bar1 = line.find('|');
    const auto bar2 = bar1 == std::string::npos ? std::string::npos : line.find('|', bar1 + 1);
    if (bar2 == std::string::npos) continue;
    const std::string id = line.substr(0, bar1);
    const auto dot = id.rfind('.');
    if (dot == std::string::npos) continue;
    SlurmStep st{id.substr(0, dot), id.substr(dot + 1), line.substr(bar1 + 1, bar2 - bar1 - 1),
                 line.substr(bar2 + 1)};
    if (!all_digits(st.step_id) || st.job_id.empty() || st.nodelist.empty()) continue;  // .batch, .extern
    out.push_back(std::move(st));
  }
  return out;
}

std::optional<SlurmStep> choose_step(const std::vector<SlurmStep>& steps,
                                     const std::optional<std::string>& step,
                                     const std::optional<std::string>& self) {
  std::optional<SlurmStep> best, best_ddprun;
  const auto newer = [](const std::optional<SlurmStep>& a, const SlurmStep& b) {
    return !a || std::stoll(b.step_id) > std::stoll(a->step_id);
  };
  for (const auto& s : steps) {
    if (step) {
      if (s.step_id == *step) return s;
      continue;
    }
    if (s.step_id == self) continue;
    if (newer(best, s)) best = s;
    if (s.name == "ddprun" && newer(best_ddprun, s)) best_ddprun = s;
  }
  return best_ddprun ? best_ddprun : best;
}

std::vector<JobTarget> slurm_targets(const SlurmStep& step,
                                     const std::optional<core::ReservedPorts>& reserved,
                                     const std::optional<std::string>& rdzv_id) {
  const auto hosts = core::expand_hostlist(step.nodelist);
  const std::string host = hosts.empty() ? step.nodelist : hosts.front();
  std::vector<JobTarget> out;
  // Ports come from `from`, which is also the step's run; the store serves it, or ID (step FROM).
  const auto add = [&](std::uint16_t port, const std::string& from, std::uint16_t master) {
    out.push_back({host, port, core::store_run_id(rdzv_id.value_or(from), from), {}, from, {}, master});
  };
  const auto derived = [&](const std::string& from) {
    const auto ports = core::derive_ports(from);
    add(ports.store, from, ports.master);
    for (const auto p : core::store_port_fallbacks(from)) add(p, from, ports.master);
  };
  const std::string step_run = step.job_id + "." + step.step_id;
  if (reserved) {
    add(reserved->store, step_run, reserved->master.value_or(core::derive_ports(step_run).master));
  } else {
    derived(step_run);
  }
  derived(step.job_id);  // a self-launch from a batch script plans with the job id
  return out;
}

namespace {

// Slurm node names as they may go on a command line (they are [A-Za-z0-9._-] in practice).
bool plain_name(const std::string& s) {
  return !s.empty() &&
         s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") ==
             std::string::npos;
}

// Where to reach each of `hosts` from here: "" where the name resolves, Slurm's NodeAddr where it does
// not (one `scontrol show node` for all of them), absent where neither works; `why` says why the first
// of those failed to resolve.
std::map<std::string, std::string> node_addresses(const std::vector<std::string>& hosts, std::string& why) {
  std::map<std::string, std::string> out;
  std::vector<std::string> unresolved;
  for (const auto& h : hosts) {
    const std::string err = resolve_error(h);
    if (err.empty()) {
      out[h] = "";
      continue;
    }
    if (why.empty()) why = err;
    if (plain_name(h)) unresolved.push_back(h);
  }
  if (unresolved.empty()) return out;
  const auto addrs = parse_node_addrs(
      command_output({"scontrol", "show", "node", "-o", fmt::format("{}", fmt::join(unresolved, ","))}));
  for (const auto& h : unresolved) {
    if (const auto it = addrs.find(h); it != addrs.end()) out[h] = it->second;
  }
  return out;
}

// The targets at hosts reachable from here, each with the address to connect to.
std::vector<JobTarget> reachable(std::vector<JobTarget> targets,
                                 const std::map<std::string, std::string>& addrs) {
  std::vector<JobTarget> out;
  for (auto& t : targets) {
    const auto it = addrs.find(t.host);
    if (it == addrs.end()) continue;
    t.addr = it->second;
    out.push_back(std::move(t));
  }
  return out;
}

// The first place of each run the step's store may serve: where a failover's ports count from.
std::vector<JobTarget> failover_bases(const std::vector<JobTarget>& targets) {
  std::vector<JobTarget> out;
  for (const auto& t : targets) {
    if (out.empty() || out.back().step_run != t.step_run) out.push_back(t);
  }
  return out;
}

// The step's store: where its agents put it, else where a node-0 failover moved it (every node of the
// step, the ports above). Throws core::Error (kObserveExit) naming what was tried.
std::shared_ptr<store::TcpStore> find_step_store(const SlurmStep& st, const std::vector<JobTarget>& targets,
                                                 const store::auth::Config& auth, JobTarget& found,
                                                 std::chrono::milliseconds timeout) {
  const std::string first = targets.front().host;
  std::string why;
  auto addrs = node_addresses({first}, why);
  if (addrs.count(first) == 0) {
    throw core::Error(
        fmt::format("Slurm step {}.{}'s first node {} does not resolve here ({}), and Slurm gives "
                    "it no other address (NodeAddr): run ddprun there (srun --jobid {} --overlap "
                    "-N1 ddprun top --once), or name the store with --rdzv-endpoint ADDR:PORT",
                    st.job_id, st.step_id, first, why, st.job_id),
        kObserveExit);
  }
  SearchLog log;
  if (auto s = first_store(reachable(targets, addrs), auth, timeout, found, log)) return s;
  const auto hosts = core::expand_hostlist(st.nodelist);
  addrs = node_addresses(hosts, why);
  if (auto s = first_store(reachable(failover_targets(hosts, failover_bases(targets)), addrs), auth, timeout,
                           found, log)) {
    return s;
  }
  std::vector<std::uint16_t> ports;
  ports.reserve(targets.size());
  for (const auto& t : targets) ports.push_back(t.port);
  const std::string where =
      addrs.at(first).empty() ? first : fmt::format("{} (at {})", first, addrs.at(first));
  throw core::Error(
      fmt::format(
          "no ddprun store of Slurm step {}.{} ({}) answers on {} (ports {}), nor where a node-0 "
          "failover moves it (the next {} ports on the step's {} nodes{}){}: the step has finished, or "
          "it is not a ddprun job",
          st.job_id, st.step_id, st.name, where, fmt::join(ports, ", "), kMaxFailovers + 1, hosts.size(),
          addrs.size() < hosts.size()
              ? fmt::format(", {} of them not resolving here", hosts.size() - addrs.size())
              : std::string(),
          log.other_runs.empty()
              ? std::string()
              : fmt::format("; other runs' stores answer at {}", fmt::join(log.other_runs, ", "))),
      kObserveExit);
}

}  // namespace

std::shared_ptr<store::TcpStore> connect_slurm_job(const JobQuery& q, const core::EnvSnapshot& env,
                                                   const store::auth::Config& auth, JobTarget& found,
                                                   std::chrono::milliseconds timeout) {
  std::string job = q.slurm_job.value_or("");
  if (job.empty()) {
    if (const auto it = env.find("SLURM_JOB_ID"); it != env.end()) job = it->second;
  }
  std::optional<std::string> step = q.slurm_step;
  if (const auto dot = job.find('.'); dot != std::string::npos) {  // --job JOBID.STEPID
    step = job.substr(dot + 1);
    job = job.substr(0, dot);
  }
  if (!all_digits(job)) throw core::Error(fmt::format("--job: '{}' is not a Slurm job id", job));
  const auto steps = parse_squeue_steps(command_output({"squeue", "-h", "-s", "-j", job, "-o", "%i|%j|%N"}));
  // Inside a step of the same job (srun ... ddprun top), that step is not the one to show.
  std::optional<std::string> self;
  const auto own_job = env.find("SLURM_JOB_ID");
  const auto own_step = env.find("SLURM_STEP_ID");
  if (own_job != env.end() && own_job->second == job && own_step != env.end()) self = own_step->second;
  const auto chosen = choose_step(steps, step, self);
  if (!chosen) {
    throw core::Error(step ? fmt::format("Slurm job {} has no running step {}", job, *step)
                           : fmt::format("Slurm job {} has no running step (squeue -s -j {}): has the job "
                                         "finished, or not started ddprun yet?",
                                         job, job),
                      kObserveExit);
  }
  // srun --resv-ports: the store is on the step's first reserved port, MASTER_PORT on the second.
  std::optional<core::ReservedPorts> reserved;
  const std::string show = command_output({"scontrol", "show", "step", job + "." + chosen->step_id});
  if (const auto value = core::scontrol_field(show, "ResvPorts")) {
    try {
      reserved = core::parse_reserved_ports("ResvPorts", *value == "(null)" ? "" : std::string(*value));
    } catch (const core::Error&) {
      // Unknown form: the derived ports are tried.
    }
  }
  auto s = find_step_store(*chosen, slurm_targets(*chosen, reserved, q.rdzv_id), auth, found, timeout);
  found.slurm_step = job + "." + chosen->step_id;
  return s;
}

std::shared_ptr<store::TcpStore> connect_to_job(const JobQuery& q, const core::EnvSnapshot& env,
                                                const store::auth::Config& auth, JobTarget& found,
                                                std::chrono::milliseconds timeout) {
  if (!q.rdzv_endpoint && (q.slurm_job || env.count("SLURM_JOB_ID") != 0)) {
    return connect_slurm_job(q, env, auth, found, timeout);
  }
  found = locate_job(q);
  return connect_named_job(found, auth, timeout);
}

std::vector<core::NodeStatus> read_job_status(store::TcpStore& store, const JobTarget& t) {
  const auto lost = [&t](const store::Error& e) {
    return StoreGone(fmt::format("the job's store at {} stopped answering: {}", t.describe(), e.what()),
                     e.kind() == store::Error::Kind::io);
  };
  std::optional<std::string> first;
  try {
    first = store.get(core::status_key(0), std::chrono::milliseconds{0});
  } catch (const store::Error& e) {
    if (e.kind() == store::Error::Kind::rejected || e.kind() == store::Error::Kind::other_run) {
      throw core::Error(fmt::format("the job's store at {} refused this ddprun: {}", t.describe(), e.what()),
                        kObserveExit);
    }
    throw lost(e);
  }
  if (!first) {
    std::optional<std::string> none;
    try {
      none = store.get(core::kNoStatusKey, std::chrono::milliseconds{0});
    } catch (const store::Error& e) {
      throw lost(e);
    }
    if (none)
      throw core::Error(fmt::format("the job at {} publishes no status: {}", t.describe(), *none),
                        kObserveExit);
    throw core::Error(fmt::format("the job at {} has published no status yet: its workers have not started "
                                  "(still joining), or its ddprun predates `ddprun top`",
                                  t.describe()),
                      kObserveExit);
  }
  std::vector<core::NodeStatus> out;
  out.push_back(core::decode_node_status(*first));
  const int nnodes = out.front().nnodes;
  for (int n = 1; n < nnodes; ++n) {
    try {
      if (const auto rec = store.get(core::status_key(n), std::chrono::milliseconds{0})) {
        out.push_back(core::decode_node_status(*rec));
      }
    } catch (const core::Error&) {
      // A malformed record: that node is shown as silent.
    } catch (const store::Error& e) {
      throw lost(e);
    }
  }
  return out;
}

}  // namespace ddprun::launcher
