#include "job_query.hpp"

#include <cstdio>
#include <exception>
#include <iostream>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "launcher/system.hpp"

namespace ddprun::launcher {

namespace {

void add_job_options(CLI::App& app, JobQuery& q) {
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", q.rdzv_endpoint,
                 "The job's store, HOST:PORT, as the job was started with")
      ->envname("DDPRUN_RDZV_ENDPOINT");
  app.add_option("--rdzv-id,--rdzv_id", q.rdzv_id, "The job's --rdzv-id")->envname("DDPRUN_RDZV_ID");
  app.add_option("--rdzv-auth", q.rdzv_auth, "As the job's agents: auto, munge, token or none")
      ->check(CLI::IsMember({"auto", "munge", "token", "none"}))
      ->envname("DDPRUN_RDZV_AUTH");
  // The agents' variable: one name wherever the token file is read.
  app.add_option("--rdzv-token-file", q.rdzv_token_file,
                 "File holding the job's shared secret, as the agents' (else DDPRUN_TOKEN)")
      ->envname("DDPRUN_TOKEN_FILE");
  app.add_option(
      "--job", q.slurm_job,
      "A Slurm job (JOBID or JOBID.STEPID) instead of --rdzv-endpoint; default inside an allocation: "
      "SLURM_JOB_ID");
  app.add_option("--step", q.slurm_step, "With --job: the step (default: the newest ddprun step)");
}

}  // namespace

JobQueryCli::JobQueryCli(const std::string& command, const std::string& about, JobQuery& query)
    : command_(command), app_(about, "ddprun " + command) {
  app_.set_help_flag("-h,--help", "Print this help and exit");
  add_job_options(app_, query);
}

bool JobQueryCli::parse(int argc, const char* const* argv) {
  std::vector<const char*> args(argv + 1, argv + argc);  // the command stands for the program's name
  try {
    app_.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::CallForHelp&) {
    std::cout << app_.help();
    return false;
  } catch (const CLI::ParseError& e) {
    throw core::Error(fmt::format("{}; see ddprun {} --help", e.what(), command_));
  }
  return true;
}

JobAccess prepare_access(const JobQuery& q) {
  JobAccess a;
  a.env = snapshot_environ();
  const bool slurm = !q.rdzv_endpoint && (q.slurm_job || a.env.count("SLURM_JOB_ID") != 0);
  if (!slurm) locate_job(q);  // a usage error before anything else
  a.auth = observer_auth(q, a.env);
  return a;
}

std::shared_ptr<store::TcpStore> connect_to(const JobQuery& q, const JobAccess& access, JobTarget& found) {
  return connect_to_job(q, access.env, access.auth, found, kObserveTimeout);
}

int run_job_query(const std::string& command, const std::function<int()>& body) {
  try {
    return body();
  } catch (const core::Error& e) {
    fmt::print(stderr, "ddprun {}: error: {}\n", command, e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    fmt::print(stderr, "ddprun {}: error: {}\n", command, e.what());
    return kObserveExit;
  }
}

}  // namespace ddprun::launcher
