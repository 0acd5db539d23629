#pragma once
// The front end `ddprun top` and `ddprun stacks` share (docs/observe.md): their command line (the job,
// the credential, --help), the job located and its store connected, and whatever goes wrong as one line
// "ddprun COMMAND: error: ..." with its exit code. Each command adds only its own options and its work.
#include <CLI/CLI.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "core/slurm_env.hpp"
#include "launcher/observe/job_locator.hpp"
#include "store/auth.hpp"

namespace ddprun::store {
class TcpStore;
}

namespace ddprun::launcher {

// Every connect and read of an observer is bounded by this: a stopped node 0 is one line, not a wait.
inline constexpr std::chrono::milliseconds kObserveTimeout{3000};

// The command line of `ddprun COMMAND`: --help and the options naming the job and the credential (read
// from the same variables as the agents': DDPRUN_TOKEN_FILE, DDPRUN_RDZV_AUTH, ...) into `query`; the
// command adds its own to app() before parse().
class JobQueryCli {
 public:
  JobQueryCli(const std::string& command, const std::string& about, JobQuery& query);
  CLI::App& app() { return app_; }
  // argv[1] is the command. false: --help was printed. Throws core::Error (exit 2) ending with
  // "see ddprun COMMAND --help".
  bool parse(int argc, const char* const* argv);

 private:
  std::string command_;
  CLI::App app_;
};

// What every connection to the job uses: the environment read once and the credential as the agents
// make it.
struct JobAccess {
  core::EnvSnapshot env;
  store::auth::Config auth;
};

// Checks the query before any connection (a job not named is a usage error, exit 2, unless Slurm names
// it: --job or SLURM_JOB_ID), then makes the credential.
JobAccess prepare_access(const JobQuery& q);

// Finds the job and connects (connect_to_job, bounded by kObserveTimeout); `found` says where it is.
std::shared_ptr<store::TcpStore> connect_to(const JobQuery& q, const JobAccess& access, JobTarget& found);

// Runs the command's body: an exception becomes the line "ddprun COMMAND: error: WHAT" on stderr and the
// exit code (core::Error's own, else kObserveExit).
int run_job_query(const std::string& command, const std::function<int()>& body);

}  // namespace ddprun::launcher
