#pragma once
// Finding a running job's store and reading it, for the commands that look inside a job (`ddprun
// top`, `ddprun stacks`; docs/observe.md): where the store is (the endpoint and run id the job was
// started with, or a Slurm step's nodes and ports, and where a node-0 failover moved it), a read-only
// connection authenticated as the agents are (MUNGE or the token), and the status records. Every step
// is bounded: a wrong id, a wrong token, a finished job or nothing listening is one line (core::Error,
// exit 1), never a wait.
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/error.hpp"
#include "core/slurm_env.hpp"
#include "core/status.hpp"
#include "store/auth.hpp"

namespace ddprun::store {
class TcpStore;
}

namespace ddprun::launcher {

// Exit code of an observation that could not be made (no job there, refused, ...).
inline constexpr int kObserveExit = 1;

// How the user named the job.
struct JobQuery {
  std::optional<std::string> rdzv_endpoint;  // HOST:PORT
  std::optional<std::string> rdzv_id;
  std::string rdzv_auth = "auto";
  std::optional<std::string> rdzv_token_file;
  // Slurm (no endpoint): the job (--job, else SLURM_JOB_ID) and its step (--step, else the newest ddprun
  // step).
  std::optional<std::string> slurm_job;
  std::optional<std::string> slurm_step;
};

// The store refused our credential (connect_job): final, wherever else the job might be.
class CredentialRefused : public core::Error {
 public:
  using core::Error::Error;
};

// The job's store stopped answering (read_job_status): `closed` when it closed the connection (its
// agent ended it: the job finished, or node 0 was lost), else it did not answer in time.
class StoreGone : public core::Error {
 public:
  StoreGone(const std::string& message, bool closed) : core::Error(message, kObserveExit), closed_(closed) {}
  bool closed() const { return closed_; }

 private:
  bool closed_;
};

// Where the job's store is and which run it serves.
struct JobTarget {
  std::string host;
  std::uint16_t port = 0;
  std::string run_id;
  // Where to connect, when not `host` (Slurm's NodeAddr: `host` does not resolve here).
  std::string addr;
  // A Slurm step's JOBID.STEPID (JOBID self-launched): its store, under any --rdzv-id, is the job's.
  std::string step_run;
  std::string slurm_step;         // the Slurm step found (JOBID.STEPID): where to look again
  std::uint16_t master_port = 0;  // the run's planned MASTER_PORT, when known: the workers' store
  std::string describe() const;   // "HOST:PORT (--rdzv-id ID)" for messages
  std::string endpoint() const;   // "HOST:PORT"
  std::string connect_to() const { return addr.empty() ? host : addr; }
};

// Pure: the target from the query. Throws core::Error (exit 2) naming what is missing.
JobTarget locate_job(const JobQuery& q);

// A step of a Slurm job, as `squeue -s -h -o '%i|%j|%N'` lists it.
struct SlurmStep {
  std::string job_id;
  std::string step_id;  // a number (batch and extern steps are left out)
  std::string name;
  std::string nodelist;
};
// Pure: the numbered steps in `squeue` output; other lines are ignored.
std::vector<SlurmStep> parse_squeue_steps(const std::string& text);
// Pure: `step` when given (nullopt when it is not running), else the newest step named ddprun, else the
// newest step; never `self`, the step `top` itself runs in (srun ... ddprun top is a ddprun step too).
std::optional<SlurmStep> choose_step(const std::vector<SlurmStep>& steps,
                                     const std::optional<std::string>& step,
                                     const std::optional<std::string>& self = std::nullopt);
// Pure: where such a step's store may be, in the order to try, at the step's first host: with run id
// JOBID.STEPID its reserved port (srun --resv-ports), else the port derived from JOBID.STEPID and its
// fallbacks; then, for a self-launch from a batch script, run id JOBID on JOBID's derived port and fallbacks
// (config.hpp, derive_ports). A job started with --rdzv-id ID serves run "ID (step JOBID.STEPID)" under
// srun, "ID (step JOBID)" when self-launched (core::store_run_id).
std::vector<JobTarget> slurm_targets(const SlurmStep& step,
                                     const std::optional<core::ReservedPorts>& reserved,
                                     const std::optional<std::string>& rdzv_id = std::nullopt);

// How many node-0 failovers the search follows (each moves the store one port up, docs/elastic.md).
inline constexpr int kMaxFailovers = 8;
// Pure: where a node-0 failover may have moved a store first served at each of `bases`: on every one of
// `hosts` (the first survivor of the last round serves it), ports base+1 .. base+kMaxFailovers+1 (after g
// failovers core::failover_port gives base+g, or base+g+1 past MASTER_PORT), with the base's run id. In
// the order to try: by base, then port, then host; a base's master_port last of all, since the workers'
// store listens there and takes a ddprun hello for garbage (it is tried only when no other place serves).
std::vector<JobTarget> failover_targets(const std::vector<std::string>& hosts,
                                        const std::vector<JobTarget>& bases);

// Pure: the run id a store named when it refused ours ("this store serves run 'X', the client belongs to
// run 'OURS'"); nullopt when the refusal names none.
std::optional<std::string> served_run_id(const std::string& refusal, const std::string& ours);
// Pure: whether a store serving `served` is the one of Slurm step (or self-launched job) `step_run`: a job
// started with --rdzv-id ID serves "ID (step STEP_RUN)".
bool serves_step(const std::string& served, const std::string& step_run);

// Pure: each node's address as Slurm has it (`scontrol show node -o`: NodeName=N ... NodeAddr=A), for
// the names that do not resolve where `top` runs; a node whose NodeAddr is its name is left out.
std::map<std::string, std::string> parse_node_addrs(const std::string& text);

// Finds the job named by `q` and connects: --rdzv-endpoint and --rdzv-id, else the Slurm job (--job, else
// SLURM_JOB_ID in `env`). Where the store was is tried first, then where a node-0 failover moved it;
// a store that serves the Slurm step under another run id (--rdzv-id) is taken. `found` says where it
// is. Throws core::Error (kObserveExit) with one line when no store of the job answers.
std::shared_ptr<store::TcpStore> connect_to_job(const JobQuery& q, const core::EnvSnapshot& env,
                                                const store::auth::Config& auth, JobTarget& found,
                                                std::chrono::milliseconds timeout);

// Finds the job's store from Slurm (squeue, scontrol show step) and connects: the first target that
// serves the run. Throws core::Error (kObserveExit) naming the job when none does.
std::shared_ptr<store::TcpStore> connect_slurm_job(const JobQuery& q, const core::EnvSnapshot& env,
                                                   const store::auth::Config& auth, JobTarget& found,
                                                   std::chrono::milliseconds timeout);

// The credential as the agents make it: DDPRUN_TOKEN or --rdzv-token-file, MUNGE where munged
// answers (its socket as Slurm finds it). Throws core::Error (exit 2) on an unusable policy.
store::auth::Config observer_auth(const JobQuery& q, const core::EnvSnapshot& env);

// A read-only connection to the job's store, the hello answered before it returns. Throws
// core::Error (kObserveExit) with one line: nothing listening (the job finished or never started
// there), another run's store (wrong id, naming the one it serves), a refused credential, no answer in time.
std::shared_ptr<store::TcpStore> connect_job(const JobTarget& t, const store::auth::Config& auth,
                                             std::chrono::milliseconds timeout);

// Every node's status record: node rank 0's first, which says how many nodes the job has; nodes
// whose record is missing or malformed are left out. Throws core::Error (kObserveExit) when node
// rank 0 has published none (a job still joining, per-task mode, or a ddprun without `top`), and
// StoreGone when the store stops answering.
std::vector<core::NodeStatus> read_job_status(store::TcpStore& store, const JobTarget& t);

}  // namespace ddprun::launcher
