// ddprun as a user runs it: hostlist, dry-run (text and JSON), help/version, and bad input.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "run_process.hpp"
#include "support/paths.hpp"

using ddprun::test::run_process;

namespace {

std::vector<std::string> cmdline(std::vector<std::string> args) {
  args.insert(args.begin(), ddprun_test::ddprun_exe());
  return args;
}

std::map<std::string, std::string> slurm_step(int node) {
  return {{"SLURM_JOB_ID", "4242"},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_STEP_NODELIST", "gpu[07-08]"},
          {"SLURM_NODELIST", "gpu[07-10]"},
          {"SLURM_STEP_NUM_NODES", "2"},
          {"SLURM_STEP_NUM_TASKS", "2"},
          {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
          {"SLURM_NODEID", std::to_string(node)},
          {"SLURM_PROCID", std::to_string(node)},
          {"SLURM_LOCALID", "0"},
          {"CUDA_VISIBLE_DEVICES", "0,1,2,3"}};
}

// Bad input: non-zero exit, exactly one line on stderr naming `culprit`, nothing on stdout.
void check_bad(const std::vector<std::string>& args, const std::string& culprit,
               std::map<std::string, std::string> env = {}) {
  auto r = run_process(cmdline(args), env);
  INFO("stderr: " << r.err);
  CHECK(r.code == 2);
  CHECK(r.out.empty());
  CHECK_THAT(r.err, Catch::StartsWith("ddprun: error: ") && Catch::Contains(culprit));
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

}  // namespace

TEST_CASE("ddprun hostlist expands like scontrol show hostnames", "[cli][hostlist]") {
  auto r = run_process(cmdline({"hostlist", "rack[1-2]-node[01-02]", "login,gpu-a[1-2]-ib"}));
  CHECK(r.code == 0);
  CHECK(r.out == "rack1-node01\nrack1-node02\nrack2-node01\nrack2-node02\nlogin\ngpu-a1-ib\ngpu-a2-ib\n");
  CHECK(r.err.empty());
}

TEST_CASE("ddprun hostlist: malformed expression prints nothing on stdout", "[cli][hostlist][error]") {
  auto r = run_process(cmdline({"hostlist", "ok[1-2]", "node[5-3]"}));
  CHECK(r.code != 0);
  CHECK(r.out.empty());
  CHECK_THAT(r.err, Catch::Contains("node[5-3]"));
}

TEST_CASE("ddprun hostlist is a subcommand: no expression is an error, after -- it is a command",
          "[cli][hostlist]") {
  auto r = run_process(cmdline({"hostlist"}));
  CHECK(r.code == 2);
  CHECK(r.out.empty());
  CHECK_THAT(r.err, Catch::Contains("give at least one hostlist expression"));
  r = run_process(cmdline({"hostlist", "--help"}));
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::StartsWith("Expand Slurm hostlists") && Catch::Contains("ddprun hostlist"));
  r = run_process(cmdline({"--dry-run", "--format", "json", "--", "hostlist", "a[1-2]"}));
  REQUIRE(r.code == 0);
  CHECK(nlohmann::json::parse(r.out).at("command") == nlohmann::json({"hostlist", "a[1-2]"}));
}

TEST_CASE("dry-run JSON lists every worker of the whole job", "[cli][dryrun]") {
  auto r = run_process(cmdline({"--dry-run", "--format", "json", "--gpus-per-proc", "2", "--", "python3",
                                "train.py", "--lr", "0.1"}),
                       slurm_step(1));
  REQUIRE(r.code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j.at("world_size") == 4);
  CHECK(j.at("nnodes") == 2);
  CHECK(j.at("node_rank") == 1);
  CHECK(j.at("master_addr") == "gpu07");
  CHECK(j.at("master_port").is_number());
  CHECK(j.at("run_id") == "4242.0");  // JOBID.STEPID
  CHECK(j.at("command") == nlohmann::json({"python3", "train.py", "--lr", "0.1"}));
  REQUIRE(j.at("workers").size() == 4);
  const auto& w3 = j.at("workers")[3];
  CHECK(w3.at("node_rank") == 1);
  CHECK(w3.at("host") == "gpu08");
  CHECK(w3.at("rank") == 3);
  CHECK(w3.at("local_rank") == 1);
  CHECK(w3.at("env").at("CUDA_VISIBLE_DEVICES") == "2,3");
  const int port = j.at("master_port").get<int>();
  CHECK(w3.at("env").at("MASTER_PORT") == std::to_string(port));
  for (const auto& item : w3.at("env").items()) CHECK(item.value().is_string());
}

TEST_CASE("dry-run text is a table naming node, host, rank, local rank and GPUs", "[cli][dryrun]") {
  auto r = run_process(cmdline({"--dry-run", "--nproc-per-node", "2", "true"}), slurm_step(0));
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("world size 4") && Catch::Contains("gpu07") && Catch::Contains("gpu08") &&
                        Catch::Contains("0,1,2,3"));
}

TEST_CASE("rank order topology: the dry run names this node's switch or block, or why it has none",
          "[cli][dryrun][rank_order]") {
  auto env = slurm_step(1);
  env["SLURM_TOPOLOGY_ADDR"] = "s0.s3.gpu08";
  auto r = run_process(cmdline({"--dry-run", "--rank-order", "topology", "true"}), env);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out,
             Catch::Contains("rank order: topology") &&
                 Catch::Contains("This node (gpu08): switch/block s0.s3 (SLURM_TOPOLOGY_ADDR s0.s3.gpu08)"));
  env["DDPRUN_RANK_ORDER"] = "topology";
  env["SLURM_TOPOLOGY_ADDR"] = "b3.gpu08";
  r = run_process(cmdline({"--dry-run", "--format", "json", "true"}), env);
  REQUIRE(r.code == 0);
  CHECK(nlohmann::json::parse(r.out).at("rank_order") ==
        nlohmann::json({{"order", "topology"}, {"topology_addr", "b3.gpu08"}, {"group", "b3"}}));
  env["SLURM_TOPOLOGY_ADDR"] = "gpu08";  // no topology plugin: the node's own name
  r = run_process(cmdline({"--dry-run", "--format", "json", "true"}), env);
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out).at("rank_order");
  CHECK(j.at("group").is_null());
  CHECK(j.at("why") == "SLURM_TOPOLOGY_ADDR names no switch or block (no topology plugin?)");
  // The default plan says nothing of it.
  r = run_process(cmdline({"--dry-run", "--format", "json", "true"}), slurm_step(1));
  REQUIRE(r.code == 0);
  CHECK_FALSE(nlohmann::json::parse(r.out).contains("rank_order"));
}

TEST_CASE("flags beat DDPRUN_* variables, which beat defaults", "[cli][precedence]") {
  auto env = std::map<std::string, std::string>{{"DDPRUN_NPROC_PER_NODE", "3"}};
  auto r = run_process(cmdline({"--dry-run", "--format", "json", "true"}), env);
  REQUIRE(r.code == 0);
  CHECK(nlohmann::json::parse(r.out).at("world_size") == 3);
  r = run_process(cmdline({"--dry-run", "--format", "json", "--nproc_per_node", "2", "true"}), env);
  REQUIRE(r.code == 0);
  CHECK(nlohmann::json::parse(r.out).at("world_size") == 2);
}

TEST_CASE("torchrun's PET_* variables fill flags, below DDPRUN_* variables and flags", "[cli][precedence]") {
  auto world = [](const std::vector<std::string>& args, const std::map<std::string, std::string>& env) {
    std::vector<std::string> all = {"--dry-run", "--format", "json"};
    all.insert(all.end(), args.begin(), args.end());
    all.push_back("true");
    auto r = run_process(cmdline(all), env);
    INFO("stderr: " << r.err);
    REQUIRE(r.code == 0);
    return nlohmann::json::parse(r.out).at("world_size").get<int>();
  };
  CHECK(world({}, {{"PET_NPROC_PER_NODE", "3"}}) == 3);
  CHECK(world({}, {{"PET_NPROC_PER_NODE", "3"}, {"DDPRUN_NPROC_PER_NODE", "2"}}) == 2);
  CHECK(world({"--nproc_per_node", "4"}, {{"PET_NPROC_PER_NODE", "3"}, {"DDPRUN_NPROC_PER_NODE", "2"}}) == 4);
  // A torchrun job's environment, as a wrapper script exports it.
  auto r = run_process(cmdline({"--dry-run", "--format", "json", "true"}),
                       {{"PET_NNODES", "2"},
                        {"PET_NODE_RANK", "1"},
                        {"PET_RDZV_ENDPOINT", "10.1.2.3:29400"},
                        {"PET_MASTER_PORT", "31337"},
                        {"PET_RDZV_ID", "pet-job"}});
  INFO("stderr: " << r.err);
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j.at("nnodes") == 2);
  CHECK(j.at("master_port") == 31337);
  CHECK(j.at("run_id") == "pet-job");
  // The help still names ddprun's own variables.
  auto h = run_process(cmdline({"--help"}), {{"PET_NPROC_PER_NODE", "3"}});
  CHECK_THAT(h.out, Catch::Contains("(Env:DDPRUN_NPROC_PER_NODE)") && !Catch::Contains("(Env:PET_"));
}

TEST_CASE("a bad PET_* or DDPRUN_* value is one line naming the variable, exit 2",
          "[cli][precedence][error]") {
  check_bad({"--dry-run", "true"}, "PET_MAX_RESTARTS=abc: Could not convert: --max-restarts",
            {{"PET_MAX_RESTARTS", "abc"}});
  check_bad({"--dry-run", "true"}, "PET_STANDALONE=yes please", {{"PET_STANDALONE", "yes please"}});
  check_bad({"--dry-run", "true"}, "DDPRUN_MAX_RESTARTS=x",
            {{"PET_MAX_RESTARTS", "1"}, {"DDPRUN_MAX_RESTARTS", "x"}});
  // Read with the options, on every node: before any rendezvous (node 0's store at this endpoint never
  // answers), not when node 0's workers' store starts.
  check_bad({"--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", "127.0.0.1:1", "--rdzv-timeout", "5",
             "--no-python", "--", "/bin/true"},
            "DDPRUN_WORKER_STORE_LEGACY=2.0", {{"DDPRUN_WORKER_STORE_LEGACY", "2.0"}});
}

TEST_CASE("virtual local rank: each worker's LOCAL_RANK is 0 and it sees only its own GPUs",
          "[cli][dryrun][torchrun]") {
  auto env = slurm_step(1);  // gpu08 of two nodes, GPUs 0-3
  auto r = run_process(cmdline({"--dry-run", "--format", "json", "--virtual-local-rank", "true"}), env);
  INFO("stderr: " << r.err);
  REQUIRE(r.code == 0);
  auto j = nlohmann::json::parse(r.out);
  REQUIRE(j.at("world_size") == 8);
  for (const auto& w : j.at("workers")) {
    const int local = w.at("local_rank").get<int>();
    CHECK(w.at("env").at("LOCAL_RANK") == "0");
    CHECK(w.at("env").at("CUDA_VISIBLE_DEVICES") == std::to_string(local));
    CHECK(w.at("env").at("RANK") == std::to_string(w.at("rank").get<int>()));
  }
  // A slice of G GPUs each, from the variable torchrun 2.x reads; the text plan says so.
  env["PET_VIRTUAL_LOCAL_RANK"] = "1";
  r = run_process(cmdline({"--dry-run", "--gpus-per-proc", "2", "true"}), env);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("every worker gets LOCAL_RANK=0") && Catch::Contains("      1  2,3"));
  // Without it: the real local rank and every GPU.
  env.erase("PET_VIRTUAL_LOCAL_RANK");
  r = run_process(cmdline({"--dry-run", "--format", "json", "true"}), env);
  REQUIRE(r.code == 0);
  j = nlohmann::json::parse(r.out);
  CHECK(j.at("workers").at(7).at("env").at("LOCAL_RANK") == "3");
  CHECK(j.at("workers").at(7).at("env").at("CUDA_VISIBLE_DEVICES") == "0,1,2,3");
  // No GPUs: LOCAL_RANK is still 0, there is nothing to narrow.
  r = run_process(
      cmdline({"--dry-run", "--format", "json", "--nproc-per-node", "2", "--virtual-local-rank", "true"}));
  REQUIRE(r.code == 0);
  j = nlohmann::json::parse(r.out);
  CHECK(j.at("workers").at(1).at("env").at("LOCAL_RANK") == "0");
  CHECK_FALSE(j.at("workers").at(1).at("env").contains("CUDA_VISIBLE_DEVICES"));
  check_bad({"--dry-run", "--virtual-local-rank", "--nproc-per-node", "6", "true"}, "too few", slurm_step(0));
  check_bad({"--dry-run", "--virtual-local-rank", "--local-rank-arg", "dash", "true"}, "--local-rank-arg");
}

TEST_CASE("help and version flags exit 0", "[cli]") {
  auto h = run_process(cmdline({"--help"}));
  CHECK(h.code == 0);
  CHECK_THAT(h.out, Catch::Contains("--nproc-per-node") && Catch::Contains("--gpus-per-proc"));
  // One usage block, first, naming the command form and the hostlist subcommand.
  CHECK_THAT(h.out, Catch::StartsWith("Usage: ddprun [OPTIONS] [--] COMMAND [ARGS...]\n") &&
                        Catch::Contains("ddprun hostlist EXPR..."));
  std::size_t usages = 0;
  for (auto at = h.out.find("Usage"); at != std::string::npos; at = h.out.find("Usage", at + 1)) ++usages;
  CHECK(usages == 1);
  // Options as users type them, and defaults as ddprun derives them (from the step, not the job).
  CHECK_THAT(h.out, Catch::Contains("--tee [LEVEL]") && !Catch::Contains("{1}"));
  CHECK_THAT(h.out, Catch::Contains("(default: the Slurm step's JOBID.STEPID; for a self-launch from a batch "
                                    "script or salloc shell, the job id; else none)") &&
                        !Catch::Contains("SLURM_JOB_ID") && !Catch::Contains("derived from the job id"));
  auto v = run_process(cmdline({"--version"}));
  CHECK(v.code == 0);
  CHECK_THAT(v.out, Catch::StartsWith("ddprun "));
}

TEST_CASE("torchrun 1.13 command lines run: --tee 3, --start_method, --run_path, repeated flags",
          "[cli][torchrun]") {
  auto r = run_process(
      cmdline({"--dry-run", "--tee", "3", "--log_dir", "/tmp/ddprun-l7", "--start_method", "spawn",
               "--run_path", "--nproc_per_node", "1", "--nproc_per_node", "2", "echo", "ok"}));
  INFO("stderr: " << r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("world size 2") && Catch::Contains("command: echo ok\n"));
}

TEST_CASE("help says which options read a DDPRUN_* variable", "[cli]") {
  auto h = run_process(cmdline({"--help"}));
  CHECK_THAT(h.out, !Catch::Contains("Every option also reads") && Catch::Contains("(Env:DDPRUN_<NAME>)") &&
                        Catch::Contains("DDPRUN_NPROC_PER_NODE"));
  // Those that had none before issue 35 (docs/cli.md, "Precedence").
  for (const char* var :
       {"DDPRUN_ROLE", "DDPRUN_START_METHOD", "DDPRUN_MODULE", "DDPRUN_NO_PYTHON", "DDPRUN_RUN_PATH",
        "DDPRUN_DRY_RUN", "DDPRUN_FORMAT", "DDPRUN_PREFIX", "DDPRUN_NO_PREFIX", "DDPRUN_TEE",
        "DDPRUN_REDIRECTS", "DDPRUN_LOCAL_RANKS_FILTER", "DDPRUN_QUIET", "DDPRUN_RDZV_BACKEND",
        "DDPRUN_RDZV_CONF", "DDPRUN_MONITOR_INTERVAL", "DDPRUN_USE_ENV"}) {
    CHECK_THAT(h.out, Catch::Contains(std::string("(Env:") + var + ")"));
  }
}

TEST_CASE("every option reads DDPRUN_<NAME>: a site's defaults in the environment reach the plan",
          "[cli][precedence]") {
  const std::map<std::string, std::string> site = {{"DDPRUN_ROLE", "trainer"},
                                                   {"DDPRUN_PREFIX", "<{rank}> "},
                                                   {"DDPRUN_FORMAT", "json"},
                                                   {"DDPRUN_NO_PYTHON", "1"},
                                                   {"DDPRUN_LOCAL_RANKS_FILTER", "0"}};
  auto r = run_process(cmdline({"--dry-run", "--nproc-per-node", "2", "train.py"}), site);
  INFO("stderr: " << r.err);
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);             // DDPRUN_FORMAT=json
  CHECK(j.at("command") == nlohmann::json({"train.py"}));  // DDPRUN_NO_PYTHON: not python3 -u
  CHECK(j.at("workers")[0].at("env").at("ROLE_NAME") == "trainer");
  // A run: the prefix and the filter from the environment, the flag above them.
  r = run_process(cmdline({"--nproc-per-node", "2", "--no-python", "--", "sh", "-c", "echo hi"}), site);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("<0> hi") && !Catch::Contains("<1> hi"));
  r = run_process(
      cmdline({"--nproc-per-node", "2", "--prefix", "[{rank}] ", "--no-python", "--", "sh", "-c", "echo hi"}),
      site);
  CHECK_THAT(r.out, Catch::Contains("[0] hi") && !Catch::Contains("<0>"));
  // DDPRUN_QUIET: no startup table.
  r = run_process(cmdline({"--no-python", "--", "true"}), {{"DDPRUN_QUIET", "1"}});
  CHECK(r.code == 0);
  CHECK(r.err.empty());
}

TEST_CASE("a node rank set once for the job under Slurm is refused at once, naming where it came from",
          "[cli][slurm][error]") {
  // An srun step: each node's rank is its SLURM_NODEID; one value for every node would be claimed twice.
  auto env = slurm_step(1);
  env["DDPRUN_NODE_RANK"] = "0";
  check_bad({"--dry-run", "true"}, "DDPRUN_NODE_RANK=0 disagrees with SLURM_NODEID=1", env);
  env = slurm_step(0);
  env["PET_NODE_RANK"] = "1";  // left over from a torchrun script
  check_bad({"--dry-run", "true"}, "PET_NODE_RANK=1 disagrees with SLURM_NODEID=0", env);
  check_bad({"--dry-run", "--node-rank", "1", "true"}, "--node-rank 1 disagrees with SLURM_NODEID=0",
            slurm_step(0));
  // The same value as SLURM_NODEID (a per-node script) is fine.
  env = slurm_step(1);
  env["PET_NODE_RANK"] = "1";
  auto r = run_process(cmdline({"--dry-run", "--format", "json", "true"}), env);
  INFO(r.err);
  CHECK(r.code == 0);
  // A batch script: its options and environment reach every node's agent; refused before srun runs.
  const std::map<std::string, std::string> batch = {
      {"SLURM_JOB_ID", "77"},       {"SLURM_JOB_NODELIST", "node[1-2]"},
      {"SLURM_JOB_NUM_NODES", "2"}, {"SLURM_NODEID", "0"},
      {"SLURM_NTASKS", "2"},        {"SLURM_TASKS_PER_NODE", "1(x2)"},
      {"DDPRUN_NODE_RANK", "1"}};
  for (const auto& dry : {std::vector<std::string>{"--dry-run", "true"}, std::vector<std::string>{"true"}})
    check_bad(dry, "DDPRUN_NODE_RANK=1 would reach the agent on every node this batch script starts", batch);
}

TEST_CASE("health check typos are usage errors (exit 2), never a node failure (exit 125)",
          "[cli][health][error]") {
  // --health-check takes the next word as its command: here a flag.
  check_bad({"--health-check", "--nproc-per-node", "2", "true"},
            "--health-check '--nproc-per-node' looks like an option, not a command");
  check_bad({"--dry-run", "--health-check", "--nproc-per-node", "2", "true"}, "looks like an option");
  check_bad({"--health-check", "", "true"}, "--health-check '' is empty (an unset variable?)");
  check_bad({"--health-check", "true", "--health-check-timeout", "1e-7", "true"},
            "--health-check-timeout 1e-07 must be a number of seconds from 1 to 86400");
  check_bad({"--health-check", "true", "true"}, "DDPRUN_HEALTH_CHECK_TIMEOUT=0.0001 must be",
            {{"DDPRUN_HEALTH_CHECK_TIMEOUT", "0.0001"}});
  // What a good one still does: a failing check is the node's (125).
  auto r = run_process(cmdline({"--health-check", "exit 3", "--no-python", "--", "true"}));
  CHECK(r.code == 125);
}

TEST_CASE("the dry run shows --health-check and --requeue-on", "[cli][dryrun][health]") {
  auto r = run_process(cmdline({"--dry-run", "--health-check", "/opt/check.sh gpu", "--health-check-timeout",
                                "30", "--requeue-on", "143,200-203", "true"}),
                       slurm_step(0));
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out,
             Catch::Contains("health check: each agent runs sh -c '/opt/check.sh gpu' before its first "
                             "rendezvous round and before each restart's, for at most 30 s; a node whose "
                             "check fails or times out exits 125 (--health-check)\n"));
  CHECK_THAT(r.out,
             Catch::Contains("requeue: --requeue-on 143,200-203 has no effect here: only a batch script's "
                             "ddprun, which re-launches itself, requeues the job\n"));
  r = run_process(cmdline({"--dry-run", "--format", "json", "--health-check", "true", "true"}));
  REQUIRE(r.code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j.at("health_check") == nlohmann::json({{"command", "true"}, {"timeout_s", 60.0}}));
  CHECK_FALSE(j.contains("requeue_on"));
  // In a batch script, where it applies.
  const std::map<std::string, std::string> batch = {
      {"SLURM_JOB_ID", "77"},      {"SLURM_JOB_NODELIST", "node[1-2]"}, {"SLURM_JOB_NUM_NODES", "2"},
      {"SLURM_NODEID", "0"},       {"SLURM_RESTART_COUNT", "1"},        {"DDPRUN_REQUEUE_ON", "143"},
      {"DDPRUN_MAX_REQUEUES", "3"}};
  r = run_process(cmdline({"--dry-run", "true"}), batch);
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out,
             Catch::Contains("requeue: a job ending with exit code 143 is requeued (scontrol requeue) "
                             "while SLURM_RESTART_COUNT (1) is below --max-requeues 3 (--requeue-on)\n"));
  r = run_process(cmdline({"--dry-run", "--format", "json", "true"}), batch);
  REQUIRE(r.code == 0);
  j = nlohmann::json::parse(r.out);
  CHECK(j.at("requeue_on") ==
        nlohmann::json({{"codes", {143}}, {"max_requeues", 3}, {"restart_count", 1}, {"applies", true}}));
  CHECK_FALSE(j.contains("health_check"));
}

TEST_CASE("a dry run whose node advertises a loopback address to nodes of other names warns",
          "[cli][iface]") {
  auto r = run_process(cmdline({"--dry-run", "--local-addr", "127.0.0.1", "true"}), slurm_step(0));
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(
      r.err ==
      "ddprun: warning: gpu07 advertises 127.0.0.1, a loopback address (--local-addr 127.0.0.1), in a job of "
      "2 "
      "host names: the other nodes and the workers there would reach their own machine; choose the interface "
      "of the network between the nodes (e.g. --rdzv-iface ib0)\n");
  auto env = slurm_step(1);
  env["DDPRUN_RDZV_IFACE"] = "lo";
  r = run_process(cmdline({"--dry-run", "true"}), env);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.err, Catch::StartsWith("ddprun: warning: gpu08 advertises 127.0.0.1, a loopback address "
                                      "(DDPRUN_RDZV_IFACE=lo)"));
  // Its own address, or several agents of one machine on loopback: nothing to say.
  r = run_process(cmdline({"--dry-run", "--local-addr", "10.1.0.7", "true"}), slurm_step(0));
  CHECK(r.err.empty());
  r = run_process(cmdline({"--dry-run", "--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint",
                           "127.0.0.1:29400", "--local-addr", "127.0.0.1", "true"}));
  CHECK(r.code == 0);
  CHECK(r.err.empty());
}

TEST_CASE("standalone startup line names no run id", "[cli]") {
  auto r = run_process(cmdline({"--nproc-per-node", "2", "true"}));
  CHECK(r.code == 0);
  CHECK_THAT(r.err, Catch::StartsWith("ddprun: attempt 0: 1 node, world size 2, master 127.0.0.1:") &&
                        !Catch::Contains("run none"));
  // One worker gets its startup table too (as under srun), and --quiet hides it.
  r = run_process(cmdline({"--nproc-per-node", "1", "true"}));
  CHECK(r.code == 0);
  CHECK_THAT(r.err, Catch::StartsWith("ddprun: attempt 0: 1 node, world size 1, master 127.0.0.1:"));
  r = run_process(cmdline({"-q", "--nproc-per-node", "1", "true"}));
  CHECK(r.code == 0);
  CHECK(r.err.empty());
  r = run_process(cmdline({"--dry-run", "--nproc-per-node", "2", "true"}));
  CHECK(r.code == 0);
  CHECK_THAT(r.out,
             Catch::StartsWith("ddprun plan: standalone mode, 1 node, world size 2, master 127.0.0.1:") &&
                 !Catch::Contains("run id none"));
}

TEST_CASE("a command after -- may start with a dash", "[cli]") {
  auto r = run_process(cmdline({"--dry-run", "--format", "json", "--", "-weird"}));
  REQUIRE(r.code == 0);
  CHECK(nlohmann::json::parse(r.out).at("command")[0] == "-weird");
}

// A command that cannot start: exit `code`, one line on stderr naming `culprit`, no worker output.
void check_cannot_start(const std::vector<std::string>& args, int code, const std::string& culprit,
                        std::map<std::string, std::string> env = {}) {
  auto r = run_process(cmdline(args), std::move(env));
  INFO("stderr: " << r.err);
  CHECK(r.code == code);
  CHECK(r.out.empty());
  CHECK_THAT(r.err, Catch::StartsWith("ddprun: error: ") && Catch::Contains(culprit));
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

TEST_CASE("a .py script runs as python3 -u SCRIPT, -m MODULE as python3 -u -m MODULE", "[cli][command]") {
  ddprun::test::TempDir dir;
  const std::string script = dir / "train.py";
  std::ofstream(script) << "print('hi')\n";
  // /bin/echo stands in for the interpreter and shows the argv it was given.
  auto r = run_process(cmdline({"--nproc-per-node", "1", "--python", "/bin/echo", script, "--lr", "1"}));
  CHECK(r.code == 0);
  CHECK(r.out == "-u " + script + " --lr 1\n");
  r = run_process(cmdline({"--nproc-per-node", "1", "--python", "/bin/echo", "-m", "pkg.train", "x"}));
  CHECK(r.code == 0);
  CHECK(r.out == "-u -m pkg.train x\n");
  r = run_process(
      cmdline({"--nproc-per-node", "1", "--python", "/bin/echo", "--no-python", "/bin/echo", "a.py"}));
  CHECK(r.out == "a.py\n");
  r = run_process(cmdline({"--dry-run", "--format", "json", "train.py", "--lr", "1"}));
  REQUIRE(r.code == 0);
  CHECK(nlohmann::json::parse(r.out).at("command") ==
        nlohmann::json({"python3", "-u", "train.py", "--lr", "1"}));
}

TEST_CASE(
    "torch.distributed.launch scripts: --local-rank-arg passes each worker its local rank, --use_env is "
    "accepted",
    "[cli][command]") {
  // The seed-style command line of a torch.distributed.launch user, with ddprun in front.
  auto r = run_process(cmdline({"--dry-run", "--format", "json", "--nproc_per_node", "2", "--use_env",
                                "--local-rank-arg", "underscore", "train.py", "--lr", "0.1"}));
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE(j.at("workers").size() == 2);
  for (int l = 0; l < 2; ++l) {
    CHECK(j.at("workers")[static_cast<std::size_t>(l)].at("argv") ==
          nlohmann::json({"python3", "-u", "train.py", "--local_rank=" + std::to_string(l), "--lr", "0.1"}));
  }
  r = run_process(cmdline({"--dry-run", "--nproc-per-node", "2", "--use-env", "--local-rank-arg", "dash",
                           "-m", "pkg.train", "x"}));
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out,
             Catch::Contains("command (local rank 0): python3 -u -m pkg.train --local-rank=0 x\n") &&
                 Catch::Contains("command (local rank 1): python3 -u -m pkg.train --local-rank=1 x\n"));
  // The run itself: /bin/echo stands in for the interpreter and shows each worker's argv.
  ddprun::test::TempDir dir;
  const std::string script = dir / "train.py";
  std::ofstream(script) << "print('hi')\n";
  r = run_process(cmdline({"--nproc-per-node", "2", "--no-prefix", "--python", "/bin/echo",
                           "--local_rank_arg", "underscore", script, "--lr", "1"}));
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("-u " + script + " --local_rank=0 --lr 1\n") &&
                        Catch::Contains("-u " + script + " --local_rank=1 --lr 1\n"));
  // From the environment too; the flag wins.
  r = run_process(cmdline({"--dry-run", "--format", "json", "train.py"}),
                  {{"DDPRUN_LOCAL_RANK_ARG", "dash"}});
  REQUIRE(r.code == 0);
  CHECK(nlohmann::json::parse(r.out).at("workers")[0].at("argv")[3] == "--local-rank=0");
}

TEST_CASE("a command that cannot start fails before any worker, with one line", "[cli][command][error]") {
  ddprun::test::TempDir dir;
  check_cannot_start({"--nproc-per-node", "1", "--", "nosuch.py"}, 127, "no such file: nosuch.py");
  check_cannot_start({"--nproc-per-node", "1", "--python", "/nonexistent/python", "-m", "pkg"}, 127,
                     "python interpreter '/nonexistent/python' not found");
  check_cannot_start({"--nproc-per-node", "1", "--python", "/nonexistent/python", "train.py"}, 127,
                     "python interpreter '/nonexistent/python' not found");
  check_cannot_start({"--nproc-per-node", "1", "--python", "ddprun-no-such-python", "train.py"}, 127,
                     "python interpreter 'ddprun-no-such-python' not found in PATH");
  check_cannot_start({"--nproc-per-node", "1", dir.path()}, 126, "is a directory: " + dir.str());
  check_cannot_start({"--nproc-per-node", "1", "--python", "/bin/echo", dir.str() + "/"}, 126,
                     "is a directory");
  ::mkdir((dir / "pkg.py").c_str(), 0755);
  check_cannot_start({"--nproc-per-node", "1", "--python", "/bin/echo", dir / "pkg.py"}, 126,
                     "is a directory: " + (dir / "pkg.py"));
  // Several workers: still one error line (no startup table before it), and the interpreter never ran.
  check_cannot_start({"--nproc-per-node", "2", "--", "nosuch.py"}, 127, "no such file: nosuch.py");
  // What ddprun prepares for a worker cannot be made (no such TMPDIR for the heartbeat files): 126,
  // one line, with one worker or several.
  for (const std::string n : {"1", "2"}) {
    check_cannot_start({"--nproc-per-node", n, "--hang-timeout", "5", "--no-python", "--", "true"}, 126,
                       "cannot create a directory for heartbeat files (/nonexistent/ddprun-heartbeat-",
                       {{"TMPDIR", "/nonexistent"}});
  }
}

TEST_CASE("bad input table", "[cli][error]") {
  check_bad({"--bogus", "true"}, "unknown flag '--bogus'");
  check_bad({"--dry-run"}, "no command");
  check_bad({"--dry-run", "--format", "xml", "true"}, "--format: xml not in {text,json}");
  check_bad({"--local-rank-arg", "snake", "true"}, "--local-rank-arg: snake not in {none,underscore,dash}");
  check_bad({"--dry-run", "true"}, "--local-rank-arg", {{"DDPRUN_LOCAL_RANK_ARG", "yes"}});
  check_bad({"--nproc-per-node", "0", "true"}, "--nproc-per-node 0");
  check_bad({"--nproc-per-node", "gpu", "true"}, "no GPUs are visible");
  check_bad({"--gpus-per-proc", "0", "true"}, "--gpus-per-proc 0");
  check_bad({"--max-restarts", "-1", "true"}, "--max-restarts");
  check_bad({"--master-port", "abc", "true"}, "--master-port 'abc'");
  check_bad({"--nnodes", "3:2", "true"}, "MIN 3 is greater than MAX 2");
  check_bad({"--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "h:29400", "true"}, "--node-rank 2");
  check_bad({"--gpus-per-proc", "3", "true"}, "not divisible by --gpus-per-proc 3",
            {{"CUDA_VISIBLE_DEVICES", "0,1"}});
  check_bad({"--nproc-per-node", "3", "--procs-per-replica", "2", "true"}, "--procs-per-replica 2");
  // A dry run rejects what the run rejects.
  for (const bool dry : {true, false}) {
    std::vector<std::string> pre = dry ? std::vector<std::string>{"--dry-run"} : std::vector<std::string>{};
    auto with = [&](std::vector<std::string> args) {
      args.insert(args.begin(), pre.begin(), pre.end());
      return args;
    };
    check_bad(with({"--tee", "true"}), "--tee writes per-rank files and needs --log-dir");
    check_bad(with({"-t", "3", "true"}), "needs --log-dir");
    check_bad(with({"--prefix", "[{rnk}] ", "true"}), "{rnk}");
    check_bad(with({"-m", "--no-python", "pkg"}), "-m and --no-python");
    // An interface this machine lacks: one line naming it and the interfaces it has (lo always).
    check_bad(with({"--rdzv-iface", "nosuchif0", "true"}), "--rdzv-iface nosuchif0: node ");
    check_bad(with({"true"}), "no interface nosuchif0; its interfaces that are up with an address: lo",
              {{"DDPRUN_RDZV_IFACE", "nosuchif0"}});
    check_bad(with({"--rdzv-iface", "lo", "--local-addr", "127.0.0.1", "true"}), "give one");
  }
  auto env = slurm_step(0);
  env["SLURM_STEP_NODELIST"] = "gpu[07-";
  check_bad({"true"}, "SLURM_STEP_NODELIST", env);
  env = slurm_step(2);
  check_bad({"true"}, "SLURM_NODEID=2", env);
  env = slurm_step(0);
  env["SLURM_STEP_NUM_NODES"] = "3";
  check_bad({"true"}, "SLURM_STEP_NUM_NODES=3", env);
  check_bad({"--rank-order", "rack", "true"}, "--rank-order: rack not in {slurm,topology}");
  env = slurm_step(0);
  env["SLURM_STEP_NUM_TASKS"] = "4";
  env["SLURM_STEP_TASKS_PER_NODE"] = "2(x2)";
  check_bad({"--dry-run", "--rank-order", "topology", "true"},
            "--rank-order topology needs one ddprun per node", env);
}

TEST_CASE("log format json: every ddprun line on stderr is one JSON event", "[cli][events]") {
  // Rank 1 fails only after rank 0 has printed, so both lines must come through.
  char dir_tmpl[] = "/tmp/ddprun-cli-XXXXXX";
  const std::string dir = ::mkdtemp(dir_tmpl);
  auto r = run_process(
      cmdline({"--log-format", "json", "--nproc-per-node", "2", "--", "/bin/sh", "-c",
               "echo out; if [ \"$RANK\" = 1 ]; then for i in $(seq 1 3000); do [ -e \"$D/r0\" ] && exit 3; "
               "sleep 0.01; done; exit 3; fi; touch \"$D/r0\"; sleep 30"}),
      {{"D", dir}});
  std::system(("rm -rf '" + dir + "'").c_str());
  CHECK(r.code == 3);
  std::istringstream in(r.err);
  std::vector<std::string> events;
  std::string line;
  while (std::getline(in, line)) {
    INFO(line);
    auto j = nlohmann::json::parse(line);  // throws, failing the test, on a non-JSON line
    CHECK(j.contains("time"));
    CHECK(j.at("host").is_string());
    events.push_back(j.at("event").get<std::string>());
  }
  REQUIRE(events.size() >= 4);
  CHECK(events.front() == "rendezvous_joined");
  CHECK(events.back() == "job_finished");
  CHECK(std::count(events.begin(), events.end(), "worker_started") == 2);
  CHECK(std::count(events.begin(), events.end(), "failure_report") == 1);
  // Worker output is untouched.
  CHECK_THAT(r.out, Catch::Contains("[0]: out") && Catch::Contains("[1]: out"));
  check_bad({"--log-format", "yaml", "true"}, "--log-format: yaml not in {text,json}");
  check_bad({"true"}, "--log-format: yaml", {{"DDPRUN_LOG_FORMAT", "yaml"}});
}

namespace {

// A TCP listener on 127.0.0.1, so that the port is busy for ddprun's bind check.
struct Listener {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int port = 0;
  Listener() {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd, 1) == 0);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~Listener() { ::close(fd); }
};

// A port kept for this test without a fixed number or a bind-close-reuse race: bound with
// SO_REUSEADDR and never listening, so ddprun's bind check of MASTER_PORT (SO_REUSEADDR, as
// PyTorch's store) succeeds, while the kernel gives it to no other bind(0) or outgoing connection.
struct HeldPort {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int port = 0;
  HeldPort() {
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~HeldPort() { ::close(fd); }
  std::string str() const { return std::to_string(port); }
};

std::vector<nlohmann::json> json_lines(const std::string& err) {
  std::vector<nlohmann::json> out;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace

TEST_CASE("a busy --master-port is an error naming it, not replaced", "[cli][ports]") {
  Listener busy;
  const std::string port = std::to_string(busy.port);
  auto r = run_process(cmdline({"-q", "--master-port", port, "true"}));
  INFO("stderr: " << r.err);
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::StartsWith("ddprun: error: --master-port " + port + " is already in use") &&
                        Catch::Contains("drop --master-port"));
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  // The dry run cannot bind: it says the port is checked when the job starts.
  r = run_process(cmdline({"--dry-run", "--master-port", port, "true"}));
  CHECK_THAT(r.out, Catch::Contains("master port " + port + " is checked when the job starts"));
}

TEST_CASE("8 one-node jobs started at once on one machine get 8 distinct MASTER_PORTs", "[cli][ports]") {
  // --worker-store rank0: each worker first waits until all 8 jobs' workers run (so every ddprun has
  // chosen its port before any worker binds), then binds MASTER_PORT as PyTorch's store does
  // (SO_REUSEADDR, listen) and holds it until all 8 have tried. Two jobs given one port: one worker's
  // bind fails and its job exits 1. With the agent's store (the default) the agent listens there
  // itself: the ports must differ too.
  const bool rank0 = GENERATE(true, false);
  INFO("--worker-store " << (rank0 ? "rank0" : "agent"));
  constexpr int kJobs = 8;
  ddprun::test::TempDir dir("ddprun-ports");
  const std::string worker =
      "import os, socket, sys, time\n"
      "d = os.environ['D']\n"
      "def wait(prefix):\n"
      "    end = time.time() + 40\n"
      "    while len([f for f in os.listdir(d) if f.startswith(prefix)]) < 8 and time.time() < end:\n"
      "        time.sleep(0.01)\n"
      "open(os.path.join(d, 'started.%d' % os.getpid()), 'w').close()\n"
      "wait('started.')\n"
      "s = socket.socket()\n"
      "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
      "try:\n"
      "    if os.environ['TORCHELASTIC_USE_AGENT_STORE'] == 'True':\n"
      "        s.connect(('127.0.0.1', int(os.environ['MASTER_PORT'])))\n"
      "    else:\n"
      "        s.bind(('0.0.0.0', int(os.environ['MASTER_PORT'])))\n"
      "        s.listen()\n"
      "except OSError as e:\n"
      "    open(os.path.join(d, 'tried.%d' % os.getpid()), 'w').close()\n"
      "    sys.exit('bind MASTER_PORT=%s: %s' % (os.environ['MASTER_PORT'], e))\n"
      "open(os.path.join(d, 'tried.%d' % os.getpid()), 'w').close()\n"
      "print(os.environ['MASTER_PORT'])\n"
      "wait('tried.')\n";
  std::vector<ddprun::test::Proc> jobs;
  for (int i = 0; i < kJobs; ++i) {
    jobs.push_back(ddprun::test::start(
        cmdline({"-q", "--worker-store", rank0 ? "rank0" : "agent", "/usr/bin/python3", "-c", worker}),
        {{"D", dir.str()}}, dir.str(), "job" + std::to_string(i), false));
  }
  std::set<std::string> ports;
  for (auto& j : jobs) {
    REQUIRE(ddprun::test::wait_for(j, std::chrono::seconds(120)));
    INFO("stdout: " << j.out() << "stderr: " << j.err());
    CHECK(j.code == 0);
    ports.insert(j.out());
  }
  CHECK(ports.size() == kJobs);
}

TEST_CASE("MASTER_ADDR/MASTER_PORT from the environment: replaced with one warning naming both",
          "[cli][ports]") {
  const HeldPort port;
  auto r =
      run_process(cmdline({"-q", "--master-port", port.str(), "sh", "-c", "echo $MASTER_ADDR:$MASTER_PORT"}),
                  {{"MASTER_ADDR", "10.9.9.9"}, {"MASTER_PORT", "1234"}});
  INFO("stderr: " << r.err);
  CHECK(r.code == 0);
  CHECK(r.out == "127.0.0.1:" + port.str() + "\n");
  CHECK(r.err ==
        "ddprun: warning: MASTER_ADDR=10.9.9.9 MASTER_PORT=1234 from the environment replaced by "
        "MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
            port.str() + " for the workers; pass --master-addr / --master-port to choose them\n");
  r = run_process(cmdline({"-q", "--master-port", port.str(), "true"}),
                  {{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port.str()}});
  CHECK(r.err.empty());  // the same values: nothing replaced
}

TEST_CASE("a worker's ranks and master come from ddprun, whatever the agent's environment pre-sets",
          "[cli][ports]") {
  // As a container hook (pyxis/enroot's PyTorch hook) sets them from the Slurm task before ddprun starts.
  const HeldPort port;
  auto r = run_process(
      cmdline({"-q", "--no-prefix", "--nproc-per-node", "2", "--master-port", port.str(), "sh", "-c",
               "echo $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $MASTER_ADDR:$MASTER_PORT"}),
      {{"RANK", "5"},
       {"LOCAL_RANK", "3"},
       {"WORLD_SIZE", "16"},
       {"LOCAL_WORLD_SIZE", "8"},
       {"MASTER_ADDR", "10.9.9.9"},
       {"MASTER_PORT", "1234"}});
  INFO("stderr: " << r.err);
  REQUIRE(r.code == 0);
  std::vector<std::string> lines;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::sort(lines.begin(), lines.end());
  const std::string master = "127.0.0.1:" + port.str();
  CHECK(lines == std::vector<std::string>{"0 0 2 2 " + master, "1 1 2 2 " + master});
}

TEST_CASE("log format json: job_finished is the last line when the rendezvous fails", "[cli][events]") {
  Listener busy;  // the store's port is taken: the master cannot serve it
  auto r =
      run_process(cmdline({"--log-format", "json", "--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint",
                           "127.0.0.1:" + std::to_string(busy.port), "--rdzv-timeout", "2", "true"}));
  INFO("stderr: " << r.err);
  CHECK(r.code == 1);
  auto lines = json_lines(r.err);
  REQUIRE(lines.size() >= 2);
  CHECK(lines[lines.size() - 2].at("event") == "error");
  CHECK(lines.back().at("event") == "job_finished");
  CHECK(lines.back().at("exit_code") == 1);
}

TEST_CASE("log format json: spawn_failed says whether -m was used", "[cli][events]") {
  auto r = run_process(cmdline({"--log-format", "json", "--python", "/nonexistent/py", "-m", "foo"}));
  CHECK(r.code == 127);
  bool seen = false;
  for (const auto& j : json_lines(r.err)) {
    if (j.at("event") != "spawn_failed") continue;
    seen = true;
    CHECK(j.at("module") == true);
  }
  CHECK(seen);
  r = run_process(cmdline({"--log-format", "json", "/nonexistent/prog"}));
  for (const auto& j : json_lines(r.err)) {
    if (j.at("event") == "spawn_failed") CHECK(j.at("module") == false);
  }
}

// ddprun started in `dir` (a relative --log-dir or TMPDIR is relative to it), as `cd DIR && ddprun ARGS`.
ddprun::test::ProcResult run_in(const std::string& dir, const std::vector<std::string>& args,
                                std::map<std::string, std::string> env = {}) {
  std::vector<std::string> argv = {"/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", dir,
                                   ddprun_test::ddprun_exe()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, std::move(env));
}

TEST_CASE("a worker that changes directory still finds its error and heartbeat files", "[cli][paths]") {
  // As Hydra does: the worker leaves the directory ddprun started in, then touches its heartbeat
  // file and writes a @record-style error file. Each step fails (set -e) if its path is relative.
  const std::string worker =
      "set -e; cd /; touch \"$DDPRUN_HEARTBEAT_FILE\"; "
      "printf '{\"message\": \"RuntimeError: written-after-chdir\"}' > \"$TORCHELASTIC_ERROR_FILE\"; exit 3";
  ddprun::test::TempDir dir;
  ::mkdir((dir / "tmp").c_str(), 0700);
  struct Row {
    std::vector<std::string> flags;
    std::map<std::string, std::string> env;
  };
  const Row rows[] = {{{"--log-dir", "logs"}, {}},   // files in the relative log directory
                      {{}, {{"TMPDIR", "./tmp"}}}};  // files in a private directory under a relative TMPDIR
  for (const auto& row : rows) {
    std::vector<std::string> args = {"--hang-timeout", "60"};
    args.insert(args.end(), row.flags.begin(), row.flags.end());
    args.insert(args.end(), {"--", "/bin/sh", "-c", worker});
    auto r = run_in(dir.str(), args, row.env);
    INFO("stderr: " << r.err);
    CHECK(r.code == 3);
    CHECK_THAT(r.err, Catch::Contains("error     : RuntimeError: written-after-chdir"));
  }
  CHECK(std::filesystem::exists(dir / "logs/attempt_0/rank_0/error.json"));
}

// A Python worker that writes its whole environment out; run and dry run with `flags` see the same one.
// `faulthandler`: the run sets PYTHONFAULTHANDLER (--hang-timeout).
void check_dry_run_env(const std::vector<std::string>& flags, bool faulthandler) {
  ddprun::test::TempDir dir;
  const std::string script = dir / "dump_env.py";
  std::ofstream(script)
      << "import json, os\n"
         "with open(os.path.join(os.environ['OUT'], 'env_' + os.environ['RANK'] + '.json'), "
         "'w') as f:\n"
         "    json.dump(dict(os.environ), f)\n";
  const std::map<std::string, std::string> base = {{"OUT", dir.str()}, {"TMPDIR", dir.str()}};
  // A port of its own: a busy default would be replaced at the run, as the dry run says it may be.
  const HeldPort held;
  const std::string port = held.str();
  std::vector<std::string> args = {"--nproc-per-node", "2",        "--log-dir",
                                   dir / "logs",       "--python", "/usr/bin/python3",
                                   "--master-port",    port,       script};
  args.insert(args.begin(), flags.begin(), flags.end());
  std::vector<std::string> dry = {"--dry-run", "--format", "json"};
  dry.insert(dry.end(), args.begin(), args.end());
  const auto plan = run_process(cmdline(dry), base);
  REQUIRE(plan.code == 0);
  const auto run = run_process(cmdline(args), base);
  INFO("stderr: " << run.err);
  REQUIRE(run.code == 0);
  const auto workers = nlohmann::json::parse(plan.out).at("workers");
  REQUIRE(workers.size() == 2);
  for (const auto& w : workers) {
    const int rank = w.at("rank").get<int>();
    CAPTURE(rank);
    const auto shown = w.at("env").get<std::map<std::string, std::string>>();
    const auto got =
        nlohmann::json::parse(ddprun::test::read_file(dir / ("env_" + std::to_string(rank) + ".json")))
            .get<std::map<std::string, std::string>>();
    // Every variable shown is the worker's, and every variable the run set or changed is shown. The
    // stacks hook's directory is always a private one: the dry run names it by its template.
    const std::regex made("ddprun-stacks-[A-Za-z0-9]{6}");
    for (const auto& [k, v] : shown) {
      CAPTURE(k);
      CHECK(got.count(k) == 1);
      if (got.count(k) == 1) CHECK(std::regex_replace(got.at(k), made, "ddprun-stacks-XXXXXX") == v);
    }
    for (const auto& [k, v] : got) {
      const auto inherited = base.find(k);
      const bool standard = k == "PATH" || k == "PWD" || k == "SHLVL" || k == "_" || k == "LC_CTYPE";
      if ((inherited != base.end() && inherited->second == v) || standard) continue;
      CAPTURE(k);
      CHECK(shown.count(k) == 1);
    }
    CHECK(shown.count("DDPRUN_HEARTBEAT_FILE") == 1);
    CHECK(shown.count("PYTHONFAULTHANDLER") == (faulthandler ? 1 : 0));
    CHECK(shown.count("TORCHELASTIC_ERROR_FILE") == 1);
    CHECK(shown.count("DDPRUN_STACKS_FILE") == 1);
  }
}

TEST_CASE("the dry run's env is exactly what a run exports to each worker", "[cli][dryrun]") {
  check_dry_run_env({"--hang-timeout", "60"}, true);
  // Steps for --max-restarts-without-progress: the heartbeat file without --hang-timeout.
  check_dry_run_env({"--max-restarts-without-progress", "2"}, false);
  ddprun::test::TempDir dir;
  const std::map<std::string, std::string> base = {{"TMPDIR", dir.str()}};
  // Without --log-dir the run makes private directories: the dry run names them with their template.
  const auto tmp = run_process(
      cmdline({"--dry-run", "--format", "json", "--hang-timeout", "60", "--no-python", "--", "true"}), base);
  REQUIRE(tmp.code == 0);
  const auto env = nlohmann::json::parse(tmp.out).at("workers")[0].at("env");
  CHECK(env.at("TORCHELASTIC_ERROR_FILE") == dir / "ddprun-errors-XXXXXX/rank_0.json");
  CHECK(env.at("DDPRUN_HEARTBEAT_FILE") == dir / "ddprun-heartbeat-XXXXXX/rank_0/heartbeat");
  CHECK(env.count("PYTHONFAULTHANDLER") == 0);  // not a Python command
}

TEST_CASE("an elastic job that survives no lost node is told so at start and in the dry run",
          "[cli][elastic]") {
  // --nnodes 1:2: MIN is 1, but 1 node left of 2 is no strict majority, so no loss is survived.
  const std::vector<std::string> job = {"--nnodes",         "1:2",         "--node-rank",    "0",
                                        "--rdzv-endpoint",  "127.0.0.1:0", "--max-restarts", "2",
                                        "--rdzv-last-call", "1",           "--rdzv-timeout", "60"};
  auto with = [&](std::vector<std::string> front) {
    front.insert(front.end(), job.begin(), job.end());
    front.insert(front.end(), {"--", "true"});
    return cmdline(front);
  };
  const std::string says =
      "this elastic job survives no lost node: 1 of its 2 nodes left would not be a strict "
      "majority of the last round";
  auto plan = run_process(with({"--dry-run"}), {{"DDPRUN_RDZV_AUTH", "none"}});
  REQUIRE(plan.code == 0);
  CHECK_THAT(plan.out, Catch::Contains(says) && !Catch::Contains("while at least 1 of 2"));
  // The run (one node joins; MIN lets it start after the last call) warns before it starts.
  auto run = run_process(with({}), {{"DDPRUN_RDZV_AUTH", "none"}});
  INFO("stderr: " << run.err);
  CHECK(run.code == 0);
  CHECK_THAT(run.err, Catch::StartsWith("ddprun: warning: " + says));
}

TEST_CASE("rdzv endpoint HOST:0: the master serves on a free port, says which, and the others join it",
          "[cli][ports]") {
  ddprun::test::TempDir dir;
  auto agent = [&](int node_rank, const std::string& endpoint, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--nnodes",        "2",      "--node-rank",    std::to_string(node_rank),
                                     "--rdzv-endpoint", endpoint, "--rdzv-timeout", "60"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"--", "sh", "-c", "echo rank $RANK"});
    return ddprun::test::start(cmdline(args), {{"DDPRUN_RDZV_AUTH", "none"}}, dir.str(),
                               "agent" + std::to_string(node_rank), false);
  };
  auto master = agent(0, "127.0.0.1:0", {"--log-format", "json"});
  // The store's port, from the master's rendezvous_listening event (its first line).
  int port = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (port == 0 && std::chrono::steady_clock::now() < end && !ddprun::test::exited(master)) {
    std::istringstream in(master.err());
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.value("event", "") == "rendezvous_listening") port = j.at("port").get<int>();
    }
    if (port == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  INFO("master: " << master.err());
  REQUIRE(port > 0);
  const std::string endpoint = "127.0.0.1:" + std::to_string(port);
  CHECK_THAT(master.err(), Catch::Contains("rendezvous store listening on " + endpoint +
                                           "; start the other agents with --rdzv-endpoint " + endpoint));
  auto other = agent(1, endpoint);
  REQUIRE(ddprun::test::wait_for(master, std::chrono::seconds(120)));
  REQUIRE(ddprun::test::wait_for(other, std::chrono::seconds(120)));
  INFO("node 1: " << other.err());
  CHECK(master.code == 0);
  CHECK(other.code == 0);
  CHECK(master.out() == "[0]: rank 0\n");
  CHECK(other.out() == "[1]: rank 1\n");
  // Text mode says it too, --quiet or not: the other agents need it.
  const auto quiet = run_process(cmdline({"-q", "--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint",
                                          "127.0.0.1:0", "--rdzv-timeout", "1", "true"}),
                                 {{"DDPRUN_RDZV_AUTH", "none"}});
  CHECK(quiet.code == 1);  // nobody joined
  CHECK_THAT(quiet.err, Catch::StartsWith("ddprun: rendezvous store listening on 127.0.0.1:"));
  // Only the master can pick the port; the dry run says where it will be said.
  check_bad({"--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", "127.0.0.1:0", "true"},
            "lets only node 0 (node rank 0) pick a free port");
  auto plan = run_process(
      cmdline({"--dry-run", "--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "127.0.0.1:0", "true"}));
  CHECK_THAT(
      plan.out,
      Catch::Contains("rendezvous store: 127.0.0.1, on a free port that node rank 0 prints when it starts"));
}

// Issue 37 §2: the Slurm queries ran through popen, so a squeue that could not run read as empty output:
// "Slurm job 123 has no running step ... has the job finished", about a job that may well be running.
TEST_CASE("top and stacks --job: squeue not on PATH is said as it is, in one line", "[cli][observe]") {
  for (const std::string cmd : {"top", "stacks"}) {
    std::vector<std::string> argv = {ddprun_test::ddprun_exe(), cmd, "--job", "123"};
    if (cmd == "top") argv.push_back("--once");
    const auto r = run_process(argv, {{"PATH", "/nonexistent"}});
    INFO(cmd << ": " << r.err);
    CHECK(r.code == 1);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK_THAT(r.err, Catch::StartsWith("ddprun " + cmd + ": error: squeue not found on PATH"));
    CHECK_THAT(r.err, !Catch::Contains("has no running step"));
  }
}

// Issue 37 §2: the health check was a bare fork and exec: it got the /dev/null its child opened and every
// descriptor ddprun inherited from whatever started it, where a worker gets stdin, stdout and stderr only.
TEST_CASE("health check: it runs with stdin, stdout and stderr alone, as a worker does", "[cli][health]") {
  const int inherited = ::open("/dev/null", O_RDONLY);  // no O_CLOEXEC: ddprun inherits it
  REQUIRE(inherited > 2);
  const auto r = run_process({ddprun_test::ddprun_exe(), "--standalone", "--nproc-per-node", "1",
                              "--health-check", "ls /proc/$$/fd; exit 1", "--", "true"});
  ::close(inherited);
  INFO(r.err);
  CHECK(r.code == 125);
  CHECK_THAT(r.err, Catch::Contains("exited with code 1; output: 0 | 1 | 2; fix the node"));
}
