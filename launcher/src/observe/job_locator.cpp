#include "launcher/observe/job_locator.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <utility>
#include <vector>

#include "agent/run_command.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "core/hostlist.hpp"
#include "launcher/auth_setup.hpp"
#include "store/client.hpp"
#include "store/error.hpp"

namespace ddprun::launcher {

namespace {
// The connection's label in the store's reports (it never joins, so no liveness promise).
constexpr const char* kObserverLabel = "observe";
}  // namespace

std::string JobTarget::describe() const {
  return fmt::format("{}:{} (--rdzv-id {})", host, port, run_id);
}

JobTarget locate_job(const JobQuery& q) {
  if (!q.rdzv_endpoint || !q.rdzv_id) {
    throw core::Error(
        "name the job: --rdzv-endpoint HOST:PORT and --rdzv-id ID, as the job was started with (its "
        "store's endpoint is printed by node rank 0: 'rendezvous store listening on HOST:PORT'), or a Slurm "
        "job with --job JOBID (inside an allocation, SLURM_JOB_ID)");
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
  store::ClientOptions co;
  co.host = t.host;
  co.port = t.port;
  co.run_id = t.run_id;
  co.auth = auth;
  co.label = kObserverLabel;
  co.connect_timeout = timeout;
  co.op_timeout = timeout;
  co.one_round = true;           // a refused connection is the answer: no job there
  co.wait_for_handshake = true;  // a refusal (run id, credential) is thrown here
  try {
    return std::make_shared<store::TcpStore>(std::move(co));
  } catch (const store::Error& e) {
    switch (e.kind()) {
      case store::Error::Kind::other_run:
        throw core::Error(
            fmt::format("no job with --rdzv-id {} at {}:{}: the store there serves another run; "
                        "give the id the job was started with",
                        t.run_id, t.host, t.port),
            kObserveExit);
      case store::Error::Kind::rejected:
        throw CredentialRefused(
            fmt::format("the job's store at {} refused this ddprun's credential ({}): use the "
                        "job's DDPRUN_TOKEN or --rdzv-token-file, or run as the job's user "
                        "where MUNGE serves it",
                        t.describe(), e.what()),
            kObserveExit);
      default:
        throw core::Error(fmt::format("no ddprun job is answering at {}: it has finished, or never started "
                                      "there ({})",
                                      t.describe(), e.what()),
                          kObserveExit);
    }
  }
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
  std::size_t start = 0;
  while (start < text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
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
                                     const std::optional<std::uint16_t>& reserved_store,
                                     const std::optional<std::string>& rdzv_id) {
  const auto hosts = core::expand_hostlist(step.nodelist);
  const std::string host = hosts.empty() ? step.nodelist : hosts.front();
  std::vector<JobTarget> out;
  // Ports come from `from`; the store serves `run`.
  const auto derived = [&](const std::string& from, const std::string& run) {
    out.push_back({host, core::derive_ports(from).store, run});
    for (const auto p : core::store_port_fallbacks(from)) out.push_back({host, p, run});
  };
  const std::string step_run = step.job_id + "." + step.step_id;
  const std::string run =
      !rdzv_id || *rdzv_id == step_run ? step_run : fmt::format("{} (step {})", *rdzv_id, step_run);
  if (reserved_store) {
    out.push_back({host, *reserved_store, run});
  } else {
    derived(step_run, run);
  }
  derived(step.job_id,
          rdzv_id.value_or(step.job_id));  // a self-launch from a batch script plans with the job id
  return out;
}

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
  // srun --resv-ports: the store is on the step's first reserved port.
  std::optional<std::uint16_t> reserved;
  const std::string show = command_output({"scontrol", "show", "step", job + "." + chosen->step_id});
  if (const auto at = show.find("ResvPorts="); at != std::string::npos) {
    const auto end = show.find_first_of(" \n", at);
    const std::string value =
        show.substr(at + 10, end == std::string::npos ? std::string::npos : end - at - 10);
    try {
      if (const auto r = core::parse_reserved_ports("ResvPorts", value == "(null)" ? "" : value))
        reserved = r->store;
    } catch (const core::Error&) {
      // Unknown form: the derived ports are tried.
    }
  }
  std::string tried;
  const auto targets = slurm_targets(*chosen, reserved, q.rdzv_id);
  for (const auto& t : targets) {
    try {
      found = t;
      return connect_job(t, auth, timeout);
    } catch (const CredentialRefused&) {
      throw;  // final: the job is there, and will not have us
    } catch (const core::Error&) {
      // Another run's store or nothing listening: the next place.
      tried += fmt::format("{}{}", tried.empty() ? "" : ", ", t.port);
    }
  }
  throw core::Error(fmt::format("no ddprun store of Slurm step {}.{} ({}) answers on {} (ports {}): the step "
                                "has finished, or it is not a ddprun job",
                                job, chosen->step_id, chosen->name, targets.front().host, tried),
                    kObserveExit);
}

std::vector<core::NodeStatus> read_job_status(store::TcpStore& store, const JobTarget& t) {
  const auto lost = [&t](const store::Error& e) {
    return core::Error(fmt::format("the job's store at {} stopped answering: {}", t.describe(), e.what()),
                       kObserveExit);
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
