// The optional libraries, loaded at run time (docs/install.md, "Optional libraries"): libmunge (MUNGE auth),
// libhwloc (--cpu-bind) and libcrypto (token auth). DDPRUN_LIB<NAME> pointing at a file that is not there is
// how a test makes one missing on a machine that has all three; scripts/portable-check.sh does the same in a
// chroot where they are really absent.
#include <catch2/catch.hpp>

#include <algorithm>

#include "run_process.hpp"
#include "support/paths.hpp"

using ddprun::test::run_process;

namespace {

const std::map<std::string, std::string> kNoLibs = {{"DDPRUN_LIBMUNGE", "/nonexistent/libmunge.so.2"},
                                                    {"DDPRUN_LIBHWLOC", "/nonexistent/libhwloc.so.15"},
                                                    {"DDPRUN_LIBCRYPTO", "/nonexistent/libcrypto.so.3"}};

std::map<std::string, std::string> with(std::map<std::string, std::string> env,
                                        const std::map<std::string, std::string>& more) {
  for (const auto& [k, v] : more) env[k] = v;
  return env;
}

// Exit 2 and one line, "ddprun: error: ..." containing every piece of `says`, nothing on stdout.
void check_one_line(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                    const std::vector<std::string>& says) {
  std::vector<std::string> argv = {ddprun_test::ddprun_exe()};
  argv.insert(argv.end(), args.begin(), args.end());
  const auto r = run_process(argv, env);
  INFO("stderr: " << r.err);
  CHECK(r.code == 2);
  CHECK(r.out.empty());
  CHECK_THAT(r.err, Catch::StartsWith("ddprun: error: "));
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  for (const auto& s : says) CHECK_THAT(r.err, Catch::Contains(s));
}

std::vector<std::string> node0(const std::string& auth) {
  return {"--nnodes",        "2",
          "--node-rank",     "0",
          "--rdzv-endpoint", "127.0.0.1:" + std::to_string(ddprun::test::free_port()),
          "--rdzv-auth",     auth,
          "--rdzv-timeout",  "5",
          "--no-python",     "--",
          "/bin/true"};
}

}  // namespace

TEST_CASE("version: names each optional library and whether this machine has it", "[cli][libs]") {
  // This machine has all three (scripts/setup.sh).
  auto r = run_process({ddprun_test::ddprun_exe(), "--version"});
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::StartsWith("ddprun "));
  CHECK_THAT(r.out,
             Catch::Contains("MUNGE auth (--rdzv-auth munge)") && Catch::Contains("libmunge.so.2 found"));
  CHECK_THAT(r.out, Catch::Contains("token auth (HMAC-SHA256)") && Catch::Contains("libcrypto.so.3 found"));
  CHECK_THAT(r.out, Catch::Contains("CPU binding (--cpu-bind)") && Catch::Contains("libhwloc.so.15 found"));
  r = run_process({ddprun_test::ddprun_exe(), "--version"}, kNoLibs);
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("/nonexistent/libmunge.so.2 not found") &&
                        Catch::Contains("/nonexistent/libcrypto.so.3 not found") &&
                        Catch::Contains("/nonexistent/libhwloc.so.15 not found"));
}

TEST_CASE("cpu-bind without libhwloc: one line naming it and what to do, nothing started", "[cli][libs]") {
  check_one_line(
      {"--standalone", "--nproc-per-node", "1", "--cpu-bind", "cores", "--no-python", "--", "/bin/true"},
      kNoLibs,
      {"--cpu-bind needs /nonexistent/libhwloc.so.15 (hwloc 2.x)", "install hwloc", "drop --cpu-bind"});
  // --cpu-bind none reads no topology: it runs.
  const auto r = run_process({ddprun_test::ddprun_exe(), "--standalone", "--nproc-per-node", "1",
                              "--cpu-bind", "none", "--no-python", "--", "/bin/true"},
                             kNoLibs);
  INFO(r.err);
  CHECK(r.code == 0);
}

TEST_CASE(
    "token auth without libcrypto: one line naming it, and auto never drops the token for an open store",
    "[cli][libs][auth]") {
  const auto env = with(kNoLibs, {{"DDPRUN_TOKEN", "s3cret"}});
  check_one_line(
      node0("token"), env,
      {"--rdzv-auth token: token authentication needs /nonexistent/libcrypto.so.3 (OpenSSL) for HMAC-SHA256",
       "DDPRUN_LIBCRYPTO", "--rdzv-auth munge"});
  check_one_line(node0("auto"), env,
                 {"--rdzv-auth auto: token authentication needs /nonexistent/libcrypto.so.3"});
}

TEST_CASE("rdzv-auth munge without libmunge: one line naming it and what to do", "[cli][libs][auth]") {
  check_one_line(node0("munge"), kNoLibs,
                 {"--rdzv-auth munge: MUNGE authentication needs /nonexistent/libmunge.so.2",
                  "install MUNGE's library", "--rdzv-auth token"});
}

TEST_CASE(
    "under Slurm, auto without MUNGE needs libcrypto for the private or per-job token: refused before "
    "anything starts",
    "[cli][libs][auth]") {
  // A one-agent step guards its store with a token only it knows.
  const std::map<std::string, std::string> step = {{"SLURM_JOB_ID", "4242"},
                                                   {"SLURM_STEP_ID", "0"},
                                                   {"SLURM_STEP_NODELIST", "node1"},
                                                   {"SLURM_NODELIST", "node1"},
                                                   {"SLURM_STEP_NUM_NODES", "1"},
                                                   {"SLURM_STEP_NUM_TASKS", "1"},
                                                   {"SLURM_STEP_TASKS_PER_NODE", "1"},
                                                   {"SLURM_NODEID", "0"},
                                                   {"SLURM_PROCID", "0"},
                                                   {"SLURM_LOCALID", "0"}};
  check_one_line(
      {"--nproc-per-node", "1", "--no-python", "--", "/bin/true"}, with(kNoLibs, step),
      {"guards the store with a private token", "/nonexistent/libcrypto.so.3", "--rdzv-auth none"});
  // A self-launch from a batch script would hand its agents a per-job token: said before srun is run.
  const std::map<std::string, std::string> batch = {{"SLURM_JOB_ID", "4242"},
                                                    {"SLURM_JOB_NODELIST", "node[1-2]"},
                                                    {"SLURM_NNODES", "2"},
                                                    {"SLURM_JOB_NUM_NODES", "2"}};
  check_one_line({"--nproc-per-node", "1", "--no-python", "--", "/bin/true"}, with(kNoLibs, batch),
                 {"would share a per-job token", "/nonexistent/libcrypto.so.3", "--rdzv-auth none"});
}
