// Config resolution: Slurm model, modes, precedence and every bad-input error.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <set>

#include "core/config.hpp"
#include "support/config_inputs.hpp"
#include "support/whole_plan.hpp"

using namespace ddprun::core;

using ddprun::test::build_plan;
using ddprun::test::cmd;
using ddprun::test::Plan;
using ddprun::test::sys;

namespace {

// An srun step with one task per node on node[1-2] of a 4-node job.
EnvSnapshot step_env(int node_id) {
  return {{"SLURM_JOB_ID", "1234"},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_STEP_NODELIST", "node[1-2]"},
          {"SLURM_NODELIST", "node[1-4]"},
          {"SLURM_JOB_NODELIST", "node[1-4]"},
          {"SLURM_STEP_NUM_NODES", "2"},
          {"SLURM_NNODES", "2"},
          {"SLURM_JOB_NUM_NODES", "4"},
          {"SLURM_STEP_NUM_TASKS", "2"},
          {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
          {"SLURM_NODEID", std::to_string(node_id)},
          {"SLURM_PROCID", std::to_string(node_id)},
          {"SLURM_LOCALID", "0"}};
}

}  // namespace

TEST_CASE("standalone: no Slurm, one node, loopback master", "[config]") {
  auto r = resolve(cmd(), {}, sys());
  CHECK(r.mode == Mode::standalone);
  CHECK(r.context == SlurmContext::none);
  CHECK(r.job.master_addr == "127.0.0.1");
  CHECK(r.job.master_port == kDefaultMasterPort);
  CHECK(r.rdzv_port == 0);
  CHECK(r.self.host == "ws");
  CHECK(r.command == std::vector<std::string>{"python3", "-u", "train.py"});
}

TEST_CASE("Slurm step: step variables win over the job's", "[config][slurm]") {
  auto r = resolve(cmd(), step_env(1), sys());
  CHECK(r.mode == Mode::agent);
  CHECK(r.context == SlurmContext::step);
  CHECK(r.job.nnodes == 2);  // the step, not the 4-node allocation
  CHECK(r.job.node_rank == 1);
  CHECK(r.job.master_addr == "node1");
  CHECK(r.job.run_id == "1234.0");  // job and step
  REQUIRE(r.nodes.size() == 2);
  CHECK(r.nodes[1].host == "node2");
  const auto ports = derive_ports("1234.0");
  CHECK(r.rdzv_host == "node1");
  CHECK(r.rdzv_port == ports.store);
  CHECK(r.job.master_port == ports.master);
  CHECK(r.rdzv_port != r.job.master_port);
  Plan p = build_plan(r.job, r.nodes);
  CHECK(p.workers.front().host == "node1");
}

TEST_CASE("Slurm steps of one allocation get their own run id and ports", "[config][slurm]") {
  // Two concurrent `srun --exact ddprun` steps in one salloc must never meet or collide.
  auto env_a = step_env(0);
  auto env_b = step_env(0);
  env_b["SLURM_STEP_ID"] = "1";
  const auto a = resolve(cmd(), env_a, sys());
  const auto b = resolve(cmd(), env_b, sys());
  CHECK(a.job.run_id == "1234.0");
  CHECK(b.job.run_id == "1234.1");
  CHECK(a.rdzv_port != b.rdzv_port);
  CHECK(a.job.master_port != b.job.master_port);
  // Every node of one step derives the same values.
  const auto a1 = resolve(cmd(), step_env(1), sys());
  CHECK(a1.job.run_id == a.job.run_id);
  CHECK(a1.rdzv_port == a.rdzv_port);
  CHECK(a1.job.master_port == a.job.master_port);
}

TEST_CASE("Slurm step: fallback to job variables when step ones are missing", "[config][slurm]") {
  EnvSnapshot env = {{"SLURM_JOB_ID", "9"}, {"SLURM_STEP_ID", "3"}, {"SLURM_JOB_NODELIST", "a,b,c"},
                     {"SLURM_NNODES", "3"}, {"SLURM_NTASKS", "3"},  {"SLURM_TASKS_PER_NODE", "1(x3)"},
                     {"SLURM_NODEID", "2"}};
  auto r = resolve(cmd(), env, sys());
  CHECK(r.job.nnodes == 3);
  CHECK(r.job.node_rank == 2);
  CHECK(r.self.host == "c");
}

TEST_CASE("derived ports are deterministic, distinct and in range", "[config]") {
  auto a = derive_ports("1234");
  CHECK(a.store == derive_ports("1234").store);
  CHECK(a.master == a.store + 1);
  std::set<int> seen;
  for (int j = 0; j < 200; ++j) {
    auto p = derive_ports(std::to_string(1000 + j));
    CHECK(p.store >= 20000);
    CHECK(p.master <= 32767);
    seen.insert(p.store);
  }
  CHECK(seen.size() > 150);  // two jobs rarely collide
}

TEST_CASE("a derived store port has fallbacks: distinct, even, in range, the same on every node",
          "[config]") {
  for (const std::string id : {"1234.0", "1234.1", "77", "4294967294.4294967294"}) {
    INFO(id);
    const auto first = derive_ports(id).store;
    const auto f = store_port_fallbacks(id);
    CHECK(f == store_port_fallbacks(id));
    CHECK(f.size() == kStorePortFallbacks);
    CHECK(std::set<std::uint16_t>(f.begin(), f.end()).size() == f.size());
    for (const auto p : f) {
      CHECK(p != first);
      CHECK(p % 2 == 0);  // never a derived MASTER_PORT (store + 1, odd)
      CHECK(p >= 20000);
      CHECK(p <= 32766);
    }
  }
  CHECK(store_port_fallbacks("1234.0") != store_port_fallbacks("1234.1"));
  // A step's agents look for the store on the step's ports; a port given by the user has none.
  const auto r = resolve(cmd(), step_env(1), sys());
  CHECK(r.rdzv_fallback_ports == store_port_fallbacks("1234.0"));
  auto o = cmd();
  o.rdzv_endpoint = "node1:29400";
  CHECK(resolve(o, step_env(1), sys()).rdzv_fallback_ports.empty());
  o.rdzv_endpoint = "node1";  // a host alone keeps the derived port, and its fallbacks
  CHECK(resolve(o, step_env(1), sys()).rdzv_fallback_ports == store_port_fallbacks("1234.0"));
  CHECK(resolve(cmd(), {}, sys()).rdzv_fallback_ports.empty());
}

TEST_CASE("SLURM_STEP_RESV_PORTS: ports and ranges, the store takes the first, MASTER_PORT the second",
          "[config][slurm]") {
  struct Row {
    const char* value;
    int store;
    int master;  // 0: none (a single reserved port)
  };
  for (const Row& row :
       {Row{"12000-12003", 12000, 12001}, Row{"12000,12002", 12000, 12002}, Row{"12005", 12005, 0},
        Row{"12000-12000,12007", 12000, 12007}, Row{"12009,12001-12004", 12009, 12001},
        Row{"12000,12000,12004", 12000, 12004}, Row{"1-65535", 1, 2}, Row{"65535", 65535, 0}}) {
    INFO(row.value);
    const auto p = parse_reserved_ports("SLURM_STEP_RESV_PORTS", row.value);
    REQUIRE(p);
    CHECK(p->store == row.store);
    CHECK(p->master.value_or(0) == row.master);
  }
  CHECK_FALSE(parse_reserved_ports("SLURM_STEP_RESV_PORTS", ""));
  for (const char* v :
       {"x", "12000-", "-12000", "12000,", ",12000", "12000,,12001", "12003-12000", "0", "65536",
        "12000-70000", "12000 12001", "1200a", "12000-12001-12002", "[12000-12001]"}) {
    INFO(v);
    try {
      parse_reserved_ports("SLURM_STEP_RESV_PORTS", v);
      FAIL("no error");
    } catch (const Error& e) {
      const std::string what = e.what();
      CHECK(what.find('\n') == std::string::npos);
      CHECK_THAT(what, Catch::Contains("SLURM_STEP_RESV_PORTS='" + std::string(v) + "'") &&
                           Catch::Contains("--resv-ports"));
    }
  }
}

TEST_CASE("srun --resv-ports: the step reserved ports carry the store and MASTER_PORT, flags still win",
          "[config][slurm]") {
  auto env = step_env(1);
  env["SLURM_STEP_RESV_PORTS"] = "12000-12001";
  auto r = resolve(cmd(), env, sys());
  CHECK(r.rdzv_host == "node1");
  CHECK(r.rdzv_port == 12000);
  CHECK(r.rdzv_fallback_ports.empty());  // Slurm keeps the port for this step alone
  CHECK(r.job.master_port == 12001);
  CHECK_FALSE(r.master_port_given);  // busy at start: a free one, as for a derived port
  // Every node of the step plans the same ports.
  auto env0 = step_env(0);
  env0["SLURM_STEP_RESV_PORTS"] = "12000-12001";
  CHECK(resolve(cmd(), env0, sys()).rdzv_port == 12000);
  CHECK(resolve(cmd(), env0, sys()).job.master_port == 12001);

  // One reserved port: the store takes it, MASTER_PORT is derived as without reserved ports.
  env["SLURM_STEP_RESV_PORTS"] = "12000";
  r = resolve(cmd(), env, sys());
  CHECK(r.rdzv_port == 12000);
  CHECK(r.job.master_port == derive_ports("1234.0").master);

  // Flags win: --rdzv-endpoint's port and --master-port; a host alone keeps the reserved port.
  env["SLURM_STEP_RESV_PORTS"] = "12000,12002";
  auto o = cmd();
  o.rdzv_endpoint = "node1:29400";
  o.master_port = "29600";
  r = resolve(o, env, sys());
  CHECK(r.rdzv_port == 29400);
  CHECK(r.job.master_port == 29600);
  o = cmd();
  o.rdzv_endpoint = "node2";
  r = resolve(o, env, sys());
  CHECK(r.rdzv_host == "node2");
  CHECK(r.rdzv_port == 12000);
  CHECK(r.job.master_port == 12002);
  o = cmd();
  o.rdzv_endpoint = "node1:12002";  // the store on the second: MASTER_PORT cannot share it
  r = resolve(o, env, sys());
  CHECK(r.rdzv_port == 12002);
  CHECK(r.job.master_port != 12002);

  // A malformed value is one line naming the variable.
  env["SLURM_STEP_RESV_PORTS"] = "12000-";
  CHECK_THROWS_WITH(resolve(cmd(), env, sys()), Catch::Contains("SLURM_STEP_RESV_PORTS='12000-'"));
}

TEST_CASE("the store's run id names the step, also when --rdzv-id names another", "[config][slurm]") {
  auto env_b = step_env(0);
  env_b["SLURM_STEP_ID"] = "1";
  CHECK(resolve(cmd(), step_env(0), sys()).rdzv_run_id == "1234.0");
  auto o = cmd();
  o.rdzv_id = "sweep";
  const auto a = resolve(o, step_env(0), sys());
  const auto b = resolve(o, env_b, sys());
  CHECK(a.job.run_id == "sweep");  // TORCHELASTIC_RUN_ID as given
  CHECK(a.rdzv_run_id != b.rdzv_run_id);
  CHECK(a.rdzv_run_id == resolve(o, step_env(1), sys()).rdzv_run_id);
  CHECK(resolve(o, {}, sys()).rdzv_run_id == "sweep");
}

TEST_CASE("a self-launched step plans with the job id, as its batch script's dry run did",
          "[config][slurm]") {
  // The batch script of job 1234 on node[1-2]; its self-launch is step 0 of the job.
  const EnvSnapshot batch = {
      {"SLURM_JOB_ID", "1234"}, {"SLURM_JOB_NODELIST", "node[1-2]"}, {"SLURM_JOB_NUM_NODES", "2"}};
  auto env = step_env(1);
  env["SLURM_STEP_NODELIST"] = "node[1-2]";
  env[kSelfLaunchJobVar] = "1234";
  const auto planned = resolve(cmd(), batch, sys());
  const auto run = resolve(cmd(), env, sys());
  CHECK(planned.job.run_id == "1234");
  CHECK(run.job.run_id == planned.job.run_id);
  CHECK(run.rdzv_port == planned.rdzv_port);
  CHECK(run.job.master_port == planned.job.master_port);
  CHECK(run.rdzv_fallback_ports == planned.rdzv_fallback_ports);
  // Ports Slurm reserved for the self-launched step (MpiParams=ports reserves them for every step) were
  // unknown to the dry run: the plan's ports still hold.
  env["SLURM_STEP_RESV_PORTS"] = "12000-12001";
  CHECK(resolve(cmd(), env, sys()).rdzv_port == planned.rdzv_port);
  CHECK(resolve(cmd(), env, sys()).job.master_port == planned.job.master_port);
  env.erase("SLURM_STEP_RESV_PORTS");
  // Any other step keeps JOBID.STEPID: a stale or foreign value changes nothing.
  env[kSelfLaunchJobVar] = "99";
  CHECK(resolve(cmd(), env, sys()).job.run_id == "1234.0");
  env.erase(kSelfLaunchJobVar);
  CHECK(resolve(cmd(), env, sys()).job.run_id == "1234.0");
}

TEST_CASE("per-task mode: more tasks than nodes", "[config][slurm]") {
  EnvSnapshot env = {
      {"SLURM_JOB_ID", "5"},         {"SLURM_STEP_ID", "0"},        {"SLURM_STEP_NODELIST", "n[1-2]"},
      {"SLURM_STEP_NUM_NODES", "2"}, {"SLURM_STEP_NUM_TASKS", "3"}, {"SLURM_STEP_TASKS_PER_NODE", "2,1"},
      {"SLURM_NODEID", "1"},         {"SLURM_PROCID", "2"},         {"SLURM_LOCALID", "0"}};
  auto r = resolve(cmd(), env, sys());
  CHECK(r.mode == Mode::per_task);
  // A node with a single task is still in per-task mode.
  CHECK(r.self.local_world_size == 1);
  Plan p = build_plan(r.job, r.nodes);
  REQUIRE(p.world_size == 3);
  auto mine = p.workers_on(1);
  REQUIRE(mine.size() == 1);
  CHECK(mine[0].env.at("RANK") == "2");
  CHECK(mine[0].env.at("LOCAL_RANK") == "0");
  auto o = cmd();
  o.nproc_per_node = "2";
  CHECK_THROWS_WITH(resolve(o, env, sys()),
                    Catch::Contains("--nproc-per-node") && Catch::Contains("3 tasks on 2"));
}

TEST_CASE("batch script context is recognised and is not a step", "[config][slurm]") {
  // What sbatch gives the batch shell: SLURM_NODEID=0 and SLURM_NTASKS look like a step, but no
  // SLURM_STEP_ID.
  EnvSnapshot env = {{"SLURM_JOB_ID", "77"},
                     {"SLURM_JOB_NODELIST", "node[1-3]"},
                     {"SLURM_NODELIST", "node[1-3]"},
                     {"SLURM_JOB_NUM_NODES", "3"},
                     {"SLURM_NNODES", "3"},
                     {"SLURM_NODEID", "0"},
                     {"SLURM_PROCID", "0"},
                     {"SLURM_NTASKS", "3"},
                     {"SLURM_TASKS_PER_NODE", "1(x3)"}};
  auto r = resolve(cmd(), env, sys());
  CHECK(r.context == SlurmContext::batch);
  CHECK(r.mode == Mode::agent);
  CHECK(r.allocation_hosts == std::vector<std::string>{"node1", "node2", "node3"});
  CHECK(r.job.nnodes == 3);
  auto o = cmd();
  o.nnodes = "2";
  CHECK(resolve(o, env, sys()).allocation_hosts.size() == 2);
  o.nnodes = "5";
  CHECK_THROWS_WITH(resolve(o, env, sys()), Catch::Contains("more nodes than the allocation"));
}

TEST_CASE("precedence: flags beat Slurm", "[config]") {
  auto o = cmd();
  o.master_addr = "10.0.0.9";
  o.master_port = "31000";
  o.rdzv_id = "myrun";
  o.rdzv_endpoint = "node2:29999";
  auto r = resolve(o, step_env(0), sys());
  CHECK(r.job.master_addr == "10.0.0.9");
  CHECK(r.job.master_port == 31000);
  CHECK(r.job.run_id == "myrun");
  CHECK(r.rdzv_host == "node2");
  CHECK(r.rdzv_port == 29999);
  auto o2 = cmd();
  o2.rdzv_endpoint = "node2:29999";
  CHECK(resolve(o2, step_env(0), sys()).job.master_addr == "node2");  // endpoint host before the nodelist
}

TEST_CASE("GPUs: CUDA_VISIBLE_DEVICES, then Slurm's list, and nproc gpu", "[config][gpu]") {
  auto env = step_env(0);
  env["SLURM_STEP_GPUS"] = "4,5,6,7";
  auto o = cmd();
  o.nproc_per_node = "gpu";
  o.gpus_per_proc = 2;
  auto r = resolve(o, env, sys());
  CHECK(r.self.local_world_size == 2);
  Plan p = build_plan(r.job, r.nodes);
  CHECK(p.workers[0].env.at("CUDA_VISIBLE_DEVICES") == "4,5");
  CHECK(p.workers[1].env.at("CUDA_VISIBLE_DEVICES") == "6,7");
  env["CUDA_VISIBLE_DEVICES"] = "0,1";
  CHECK(resolve(o, env, sys()).self.local_world_size == 1);
}

TEST_CASE("GPUs: an empty CUDA_VISIBLE_DEVICES hides the node's GPUs as CUDA reads it", "[config][gpu]") {
  // A workstation with /dev/nvidia0 and /dev/nvidia1; `CUDA_VISIBLE_DEVICES= ddprun ...` keeps the job off
  // them.
  auto s = sys();
  s.probed_gpus = {"0", "1"};
  auto o = cmd();
  CHECK(resolve(o, {}, s).nodes.at(0).gpus.size() == 2);
  const EnvSnapshot hidden = {{"CUDA_VISIBLE_DEVICES", ""}};
  const auto r = resolve(o, hidden, s);
  CHECK(r.nodes.at(0).gpus.empty());
  CHECK(build_plan(r.job, r.nodes).workers.at(0).env.count("CUDA_VISIBLE_DEVICES") == 0);
  o.nproc_per_node = "gpu";
  CHECK_THROWS_WITH(resolve(o, hidden, s), Catch::Contains("no GPUs are visible"));
}

TEST_CASE("rdzv endpoint HOST:0: a free port on a master started by hand, nowhere else", "[config]") {
  auto o = cmd();
  o.nnodes = "2";
  o.node_rank = 0;
  o.rdzv_endpoint = "127.0.0.1:0";
  auto r = resolve(o, {}, sys());
  CHECK(r.mode == Mode::agent);
  CHECK(r.rdzv_port == 0);
  CHECK(r.job.master_port == kDefaultMasterPort);
  o.nnodes = "1:4";  // elastic: the survivors fail over from the port the master printed
  CHECK(resolve(o, {}, sys()).rdzv_port == 0);
  o.node_rank = 1;
  CHECK_THROWS_WITH(resolve(o, {}, sys()),
                    Catch::Contains("--rdzv-endpoint 127.0.0.1:0 lets only node 0 (node rank 0)") &&
                        Catch::Contains("give node rank 1 the port node 0 printed"));
  // Agents that srun starts together could not learn the port.
  auto step = cmd();
  step.rdzv_endpoint = "node1:0";
  CHECK_THROWS_WITH(resolve(step, step_env(0), sys()), Catch::Contains("is for agents started by hand"));
  // One agent opens no store: the port does not matter.
  auto one = cmd();
  one.rdzv_endpoint = "127.0.0.1:0";
  CHECK(resolve(one, {}, sys()).mode == Mode::standalone);
  one.rdzv_endpoint = "127.0.0.1:-1";
  CHECK_THROWS_WITH(resolve(one, {}, sys()), Catch::Contains("give an integer from 0 to 65535"));
  one.rdzv_endpoint = "127.0.0.1:0";
  one.master_port = "0";  // MASTER_PORT is chosen by ddprun unless given: 0 is no port
  CHECK_THROWS_WITH(resolve(one, {}, sys()), Catch::Contains("--master-port '0' is not a port number"));
}

TEST_CASE("multi-node outside Slurm needs an endpoint and a node rank", "[config]") {
  auto o = cmd();
  o.nnodes = "2";
  CHECK_THROWS_WITH(resolve(o, {}, sys()), Catch::Contains("--node-rank"));
  o.node_rank = 1;
  CHECK_THROWS_WITH(resolve(o, {}, sys()), Catch::Contains("--rdzv-endpoint"));
  o.rdzv_endpoint = "head:29400";
  auto r = resolve(o, {}, sys());
  CHECK(r.mode == Mode::agent);
  CHECK(r.job.master_addr == "head");
  CHECK(r.rdzv_port == 29400);
  CHECK(r.nodes[1].host == "ws");
  CHECK_FALSE(r.nodes[0].host.has_value());
  o.nnodes = "1:4";
  r = resolve(o, {}, sys());
  CHECK(r.nnodes_min == 1);
  CHECK(r.nnodes_max == 4);
}

TEST_CASE("local-rank-arg: each worker's argv has its local rank where torch.distributed.launch puts it",
          "[config]") {
  struct Row {
    std::vector<std::string> command;
    bool module;
    bool no_python;
    LocalRankArg style;
    int local_rank;
    std::vector<std::string> argv;
  };
  using V = std::vector<std::string>;
  const auto U = LocalRankArg::underscore;
  const auto D = LocalRankArg::dash;
  const Row table[] = {
      // After the script, before the user's own arguments.
      {{"train.py", "--lr", "0.1"},
       false,
       false,
       U,
       3,
       V{"python3", "-u", "train.py", "--local_rank=3", "--lr", "0.1"}},
      {{"train.py", "--lr", "0.1"},
       false,
       false,
       D,
       0,
       V{"python3", "-u", "train.py", "--local-rank=0", "--lr", "0.1"}},
      {{"train.py"}, false, false, U, 1, V{"python3", "-u", "train.py", "--local_rank=1"}},
      // After the module name (python -m pkg.mod --local_rank=N ARGS).
      {{"pkg.mod", "x"}, true, false, U, 2, V{"python3", "-u", "-m", "pkg.mod", "--local_rank=2", "x"}},
      // Any other program (and --no-python): after its first word, as with launch's --no_python.
      {{"./a.out", "x", "y"}, false, false, D, 7, V{"./a.out", "--local-rank=7", "x", "y"}},
      {{"run.py", "x"}, false, true, U, 1, V{"run.py", "--local_rank=1", "x"}},
      // none: torchrun's way, the command is untouched.
      {{"train.py", "a"}, false, false, LocalRankArg::none, 5, V{"python3", "-u", "train.py", "a"}},
  };
  for (const auto& row : table) {
    const CommandSpec spec{row.command, row.no_python, row.module, "python3", row.style};
    CHECK(worker_argv(spec, row.local_rank) == row.argv);
  }
  // An argument that looks like the flag is the user's and stays where it was.
  CHECK(worker_argv({{"t.py", "--local_rank=9"}, false, false, "python3", U}, 0) ==
        V{"python3", "-u", "t.py", "--local_rank=0", "--local_rank=9"});
}

TEST_CASE("local-rank-arg: styles, and a bad one is a one-line error", "[config]") {
  CHECK(parse_local_rank_arg("underscore") == LocalRankArg::underscore);
  CHECK(parse_local_rank_arg("dash") == LocalRankArg::dash);
  CHECK(parse_local_rank_arg("none") == LocalRankArg::none);
  CHECK_THROWS_WITH(parse_local_rank_arg("Underscore"),
                    "--local-rank-arg 'Underscore' is not a style; give underscore (--local_rank=N), dash "
                    "(--local-rank=N) or none");
  auto o = cmd({"train.py", "--lr", "1"});
  o.local_rank_arg = "dash";
  const auto r = resolve(o, {}, sys());
  CHECK(r.command_spec.local_rank_arg == LocalRankArg::dash);
  CHECK(r.command == std::vector<std::string>{"python3", "-u", "train.py", "--lr", "1"});  // the common part
}

TEST_CASE("command forms: .py, -m, --no-python", "[config]") {
  auto argv = [](const Options& o) { return build_argv(command_spec(o)); };
  auto o = cmd({"train.py", "--lr", "0.1"});
  CHECK(argv(o) == std::vector<std::string>{"python3", "-u", "train.py", "--lr", "0.1"});
  o.python = "/usr/bin/python3";
  o.module = true;
  o.command = {"pkg.mod"};
  CHECK(argv(o) == std::vector<std::string>{"/usr/bin/python3", "-u", "-m", "pkg.mod"});
  o.no_python = true;
  CHECK_THROWS_WITH(argv(o), Catch::Contains("-m and --no-python"));
  o.module = false;
  o.command = {"run.py"};
  CHECK(argv(o) == std::vector<std::string>{"run.py"});
  o.no_python = false;
  o.command = {"./a.out", "x"};
  CHECK(argv(o) == std::vector<std::string>{"./a.out", "x"});
  o.command.clear();
  CHECK_THROWS_WITH(argv(o), Catch::StartsWith("no command given"));
  o.module = true;
  CHECK_THROWS_WITH(argv(o), Catch::StartsWith("no module given after -m"));
}

TEST_CASE("bad input: one-line errors naming the culprit", "[config][error]") {
  auto bad = [](Options o, EnvSnapshot env = {}) {
    try {
      resolve(o, env, sys());
    } catch (const Error& e) {
      CHECK(e.exit_code() == kUsageExit);
      CHECK(std::string(e.what()).find('\n') == std::string::npos);
      return std::string(e.what());
    }
    FAIL("no error");
    return std::string();
  };
  auto o = cmd();
  auto env = step_env(0);
  env["SLURM_STEP_NODELIST"] = "node[3-1]";
  CHECK_THAT(bad(o, env), Catch::Contains("SLURM_STEP_NODELIST") && Catch::Contains("node[3-1]"));
  env = step_env(5);
  CHECK_THAT(bad(o, env), Catch::Contains("SLURM_NODEID=5") && Catch::Contains("outside the step"));
  env = step_env(0);
  env["SLURM_STEP_NUM_NODES"] = "3";
  CHECK_THAT(bad(o, env), Catch::Contains("SLURM_STEP_NUM_NODES=3") && Catch::Contains("names 2 hosts"));
  env = step_env(0);
  env["SLURM_NODEID"] = "x";
  CHECK_THAT(bad(o, env), Catch::Contains("SLURM_NODEID='x'"));

  auto o1 = cmd();
  o1.nnodes = "4:2";
  CHECK_THAT(bad(o1), Catch::Contains("MIN 4 is greater than MAX 2"));
  auto o2 = cmd();
  o2.nnodes = "2";
  o2.node_rank = 2;
  o2.rdzv_endpoint = "h:1";
  CHECK_THAT(bad(o2), Catch::Contains("--node-rank 2"));
  auto o3 = cmd();
  o3.nproc_per_node = "0";
  CHECK_THAT(bad(o3), Catch::Contains("--nproc-per-node 0"));
  auto o4 = cmd();
  o4.nproc_per_node = "gpu";
  CHECK_THAT(bad(o4), Catch::Contains("no GPUs are visible"));
  auto o5 = cmd();
  o5.gpus_per_proc = 0;
  CHECK_THAT(bad(o5), Catch::Contains("--gpus-per-proc 0"));
  auto o6 = cmd();
  o6.max_restarts = -1;
  CHECK_THAT(bad(o6), Catch::Contains("--max-restarts -1"));
  auto o7 = cmd();
  o7.master_port = "http";
  CHECK_THAT(bad(o7), Catch::Contains("--master-port 'http'"));
  auto o8 = cmd();
  o8.rdzv_endpoint = "host:abc";
  CHECK_THAT(bad(o8), Catch::Contains("--rdzv-endpoint"));
  auto o9 = cmd();
  o9.nproc_per_node = "3";
  o9.procs_per_replica = 2;
  CHECK_THROWS_WITH(
      [&] {
        const auto r9 = resolve(o9, {}, sys());
        return build_plan(r9.job, r9.nodes);
      }(),
      Catch::Contains("--procs-per-replica 2"));
  auto o10 = cmd();
  o10.gpus_per_proc = 2;
  auto genv = EnvSnapshot{{"CUDA_VISIBLE_DEVICES", "0,1,2"}};
  CHECK_THAT(bad(o10, genv), Catch::Contains("not divisible by --gpus-per-proc 2"));
  auto o11 = cmd({});
  CHECK_THAT(bad(o11), Catch::Contains("no command"));
  auto o12 = cmd();
  o12.master_port = "29400";
  o12.rdzv_endpoint = "h:29400";
  o12.nnodes = "2";
  o12.node_rank = 0;
  CHECK_THAT(bad(o12), Catch::Contains("store's port"));
  env = step_env(0);
  env["SLURM_STEP_TASKS_PER_NODE"] = "2(x3)";
  CHECK_THAT(bad(o, env), Catch::Contains("counts for 3 nodes"));
}

TEST_CASE("nproc-per-node cpu counts the job's CPUs on the node, not the machine's", "[config][slurm]") {
  Options o = cmd();
  o.nproc_per_node = "cpu";
  // Outside Slurm: this process's CPUs (its affinity).
  CHECK(resolve(o, {}, sys()).self.local_world_size == 8);
  // In a step that holds 3 of the node's CPUs.
  auto env = step_env(0);
  env["SLURM_CPUS_ON_NODE"] = "3";
  CHECK(resolve(o, env, sys()).self.local_world_size == 3);
  // Never more than the affinity allows, whatever Slurm says.
  env["SLURM_CPUS_ON_NODE"] = "64";
  CHECK(resolve(o, env, sys()).self.local_world_size == 8);
  env.erase("SLURM_CPUS_ON_NODE");
  CHECK(resolve(o, env, sys()).self.local_world_size == 8);
}

TEST_CASE("salloc shell: GPU checks wait for the nodes instead of failing here", "[config][slurm][gpu]") {
  // The salloc shell of `salloc -N2 --gres=gpu:2` has no GPU variables (they belong to steps).
  EnvSnapshot env = {{"SLURM_JOB_ID", "78"},
                     {"SLURM_JOB_NODELIST", "gpu[1-2]"},
                     {"SLURM_NODELIST", "gpu[1-2]"},
                     {"SLURM_JOB_NUM_NODES", "2"},
                     {"SLURM_NNODES", "2"},
                     {"SLURM_NTASKS", "2"},
                     {"SLURM_TASKS_PER_NODE", "1(x2)"}};
  Options o = cmd();
  o.nproc_per_node = "gpu";
  const auto r = resolve(o, env, sys());
  CHECK(r.context == SlurmContext::batch);
  CHECK(r.gpus_on_nodes);
  CHECK(r.self.local_world_size == 1);  // an assumption, said so by the dry-run
  o.gpus_per_proc = 2;
  CHECK_NOTHROW(resolve(o, env, sys()));
  // Inside a step the same request with no GPUs is still an error, on the node that has none.
  auto step = step_env(0);
  Options s = cmd();
  s.nproc_per_node = "gpu";
  CHECK_THROWS_WITH(resolve(s, step, sys()), Catch::Contains("no GPUs are visible"));
  // A batch shell that does see GPUs plans with them.
  env["SLURM_JOB_GPUS"] = "0,1";
  Options g = cmd();
  g.nproc_per_node = "gpu";
  const auto rg = resolve(g, env, sys());
  CHECK_FALSE(rg.gpus_on_nodes);
  CHECK(rg.self.local_world_size == 2);
}

TEST_CASE("a heterogeneous job's shell plans one job over every component, component after component",
          "[config][slurm]") {
  // What salloc gives a heterogeneous job's shell: per-component lists, no plain SLURM_JOB_NODELIST;
  // sbatch also sets SLURM_JOB_NODELIST, SLURM_JOB_NUM_NODES and the GPUs, all of component 0 alone.
  EnvSnapshot env = {{"SLURM_JOB_ID", "80"},
                     {"SLURM_HET_SIZE", "2"},
                     {"SLURM_JOB_NODELIST_HET_GROUP_0", "node3"},
                     {"SLURM_JOB_NODELIST_HET_GROUP_1", "node[1-2]"}};
  for (const bool sbatch : {false, true}) {
    auto e = env;
    if (sbatch) {
      e["SLURM_JOB_NODELIST"] = "node3";
      e["SLURM_JOB_NUM_NODES"] = "1";
      e["SLURM_JOB_GPUS"] = "0,1";
      e["CUDA_VISIBLE_DEVICES"] = "0,1";
    }
    auto o = cmd();
    o.nproc_per_node = "gpu";
    auto batch_host = sys();
    batch_host.probed_gpus = {"0", "1", "2", "3"};  // the batch runs on a node of component 0
    const auto r = resolve(o, e, batch_host);
    CHECK(r.context == SlurmContext::batch);
    CHECK(r.allocation_hosts == std::vector<std::string>{"node3", "node1", "node2"});
    CHECK(r.het_components == 2);
    CHECK(r.job.master_addr == "node3");  // node rank 0: component 0's first node
    CHECK(r.gpus_on_nodes);               // component 0's GPUs are not the others'
  }
  auto o = cmd();
  o.nnodes = "2";
  CHECK_THROWS_WITH(resolve(o, env, sys()), Catch::Contains("heterogeneous job has 3 nodes in 2 components"));
  // Without every component's list: one line saying how to start it.
  EnvSnapshot partial = {
      {"SLURM_JOB_ID", "80"}, {"SLURM_HET_SIZE", "2"}, {"SLURM_JOB_NODELIST_HET_GROUP_0", "n1"}};
  CHECK_THROWS_WITH(resolve(cmd(), partial, sys()),
                    Catch::Contains("heterogeneous job") && Catch::Contains("srun --het-group=N ddprun"));
  // Without the het marker the old message stays.
  EnvSnapshot plain = {{"SLURM_JOB_ID", "81"}};
  CHECK_THROWS_WITH(resolve(cmd(), plain, sys()), Catch::Contains("no nodelist"));
}

TEST_CASE("a step over several components of a heterogeneous job numbers its nodes component after component",
          "[config][slurm]") {
  // srun --het-group=0-1 with component 0 on node3: SLURM_STEP_NODELIST is sorted, but SLURM_NODEID 0 is
  // node3 (seen on Slurm 22.05). Node rank 0 serves the store: every agent must look for it on node3.
  EnvSnapshot env = {{"SLURM_JOB_ID", "27"},
                     {"SLURM_STEP_ID", "0"},
                     {"SLURM_HET_SIZE", "2"},
                     {"SLURM_JOB_NODELIST_HET_GROUP_0", "node3"},
                     {"SLURM_JOB_NODELIST_HET_GROUP_1", "node[1-2]"},
                     {"SLURM_STEP_NODELIST", "node[1-3]"},
                     {"SLURM_STEP_NUM_NODES", "3"},
                     {"SLURM_STEP_NUM_TASKS", "3"},
                     {"SLURM_STEP_TASKS_PER_NODE", "1(x3)"},
                     {"SLURM_NODEID", "1"},
                     {"SLURM_PROCID", "1"},
                     {"SLURM_LOCALID", "0"}};
  const auto r = resolve(cmd(), env, sys());
  CHECK(r.job.master_addr == "node3");
  CHECK(r.rdzv_host == "node3");
  CHECK(r.self.host == "node1");
  // A step within one component (plain srun: component 0) keeps its own order.
  env["SLURM_STEP_NODELIST"] = "node3";
  env["SLURM_STEP_NUM_NODES"] = "1";
  env["SLURM_STEP_NUM_TASKS"] = "1";
  env["SLURM_STEP_TASKS_PER_NODE"] = "1";
  env["SLURM_NODEID"] = "0";
  env["SLURM_PROCID"] = "0";
  CHECK(resolve(cmd(), env, sys()).job.master_addr == "node3");
  CHECK(het_node_order({"a1", "a2"}, {{"a2", "a1"}}) == std::nullopt);     // one component
  CHECK(het_node_order({"b", "c", "x"}, {{"c"}, {"b"}}) == std::nullopt);  // a host of none
  CHECK(het_node_order({"a", "b", "c"}, {{"c"}, {"a", "b"}}) == std::vector<std::string>{"c", "a", "b"});
  CHECK(het_node_order({"a", "c"}, {{"c"}, {"a", "b"}}) == std::vector<std::string>{"c", "a"});
}

TEST_CASE("config: a given --master-port travels as master_port_given, the default does not", "[config]") {
  CHECK_FALSE(resolve(cmd(), {}, sys()).master_port_given);
  auto o = cmd();
  o.master_port = "29600";
  auto r = resolve(o, {}, sys());
  CHECK(r.master_port_given);
  CHECK(r.job.master_port == 29600);
}

TEST_CASE("a requeued job: SLURM_RESTART_COUNT is the requeue count, restarts of this launch start at 0",
          "[config][slurm]") {
  CHECK(resolve(cmd(), step_env(0), sys()).job.requeue_count == 0);  // the first run has no variable
  auto env = step_env(0);
  env["SLURM_RESTART_COUNT"] = "2";
  const auto r = resolve(cmd(), env, sys());
  CHECK(r.job.requeue_count == 2);
  CHECK(r.job.restart_count == 0);  // TORCHELASTIC_RESTART_COUNT counts restarts of this launch only
  const Plan p = build_plan(r.job, r.nodes);
  CHECK(p.workers.front().env.at("DDPRUN_REQUEUE_COUNT") == "2");
  CHECK(p.workers.front().env.at("TORCHELASTIC_RESTART_COUNT") == "0");
  env["SLURM_RESTART_COUNT"] = "x";
  CHECK_THROWS_WITH(resolve(cmd(), env, sys()), Catch::Contains("SLURM_RESTART_COUNT='x'"));
}

TEST_CASE("hang timeout: a positive number of seconds, else one clear line", "[config]") {
  auto o = cmd();
  o.hang_timeout = 2.5;
  CHECK_NOTHROW(resolve(o, {}, sys()));
  for (double bad : {0.0, -3.0, std::numeric_limits<double>::infinity(), std::nan("")}) {
    o.hang_timeout = bad;
    INFO(bad);
    CHECK_THROWS_WITH(resolve(o, {}, sys()), Catch::Contains("--hang-timeout") &&
                                                 Catch::Contains("must be a positive number of seconds"));
  }
}

TEST_CASE("health check timeout: 1 s to a day, else one clear line", "[config]") {
  auto o = cmd();
  for (double good : {1.0, 60.0, 86400.0}) {
    o.health_check_timeout = good;
    CHECK_NOTHROW(resolve(o, {}, sys()));
  }
  // 1e-7 (a typo) would fail every healthy node as a node failure (exit 125).
  for (double bad :
       {0.0, -3.0, 1e-7, 0.5, 86401.0, 1e300, std::numeric_limits<double>::infinity(), std::nan("")}) {
    o.health_check_timeout = bad;
    INFO(bad);
    CHECK_THROWS_WITH(resolve(o, {}, sys()),
                      Catch::StartsWith("--health-check-timeout ") &&
                          Catch::Contains("must be a number of seconds from 1 to 86400"));
  }
  o.health_check_timeout = 1e-7;
  o.from_variable["--health-check-timeout"] = "DDPRUN_HEALTH_CHECK_TIMEOUT";
  CHECK_THROWS_WITH(resolve(o, {}, sys()), Catch::StartsWith("DDPRUN_HEALTH_CHECK_TIMEOUT=1e-07 must be"));
}

TEST_CASE("health check command: empty or an option's name is a usage error, not a node failure",
          "[config][error]") {
  struct Row {
    std::string cmd;
    std::string error;  // "" for none
  };
  for (const Row& row : std::vector<Row>{
           {"/opt/site/gpu_check.sh", ""},
           {"nvidia-smi -L", ""},
           {"  test -e /dev/nvidia0", ""},
           {"", "--health-check '' is empty (an unset variable?)"},
           {"  ", "--health-check '  ' is empty"},
           {"--nproc-per-node", "--health-check '--nproc-per-node' looks like an option, not a command"},
           {"-x", "--health-check '-x' looks like an option"},
           {" --tee", "--health-check ' --tee' looks like an option"},
       }) {
    auto o = cmd();
    o.health_check = row.cmd;
    INFO("'" << row.cmd << "'");
    if (row.error.empty()) {
      CHECK_NOTHROW(resolve(o, {}, sys()));
    } else {
      CHECK_THROWS_WITH(resolve(o, {}, sys()), Catch::StartsWith(row.error));
    }
  }
  auto o = cmd();
  o.health_check = "-v";
  o.from_variable["--health-check"] = "DDPRUN_HEALTH_CHECK";
  CHECK_THROWS_WITH(resolve(o, {}, sys()),
                    Catch::StartsWith("DDPRUN_HEALTH_CHECK='-v' looks like an option"));
}

TEST_CASE("a node rank set for the whole job under Slurm: refused where it is not SLURM_NODEID",
          "[config][slurm][error]") {
  struct Row {
    std::optional<int> node_rank;
    std::string variable;  // "" for the flag
    int node_id;
    std::string error;  // "" for none
  };
  for (const Row& row : std::vector<Row>{
           {std::nullopt, "", 1, ""},
           {1, "", 1, ""},  // what each node's own script may set
           {0, "DDPRUN_NODE_RANK", 0, ""},
           {0, "", 1, "--node-rank 0 disagrees with SLURM_NODEID=1 of this node"},
           {1, "DDPRUN_NODE_RANK", 0, "DDPRUN_NODE_RANK=1 disagrees with SLURM_NODEID=0"},
           {1, "PET_NODE_RANK", 0, "PET_NODE_RANK=1 disagrees with SLURM_NODEID=0"},
       }) {
    auto o = cmd();
    o.node_rank = row.node_rank;
    if (!row.variable.empty()) o.from_variable["--node-rank"] = row.variable;
    INFO(row.variable << " " << row.node_rank.value_or(-1) << " on node id " << row.node_id);
    if (row.error.empty()) {
      CHECK(resolve(o, step_env(row.node_id), sys()).job.node_rank == row.node_id);
      continue;
    }
    try {
      resolve(o, step_env(row.node_id), sys());
      FAIL("no error");
    } catch (const Error& e) {
      const std::string what = e.what();
      CHECK(e.exit_code() == kUsageExit);
      CHECK_THAT(what, Catch::StartsWith(row.error));
      const std::string fix = row.variable.empty() ? "drop --node-rank"
                              : row.variable == "PET_NODE_RANK"
                                  ? "unset PET_NODE_RANK (left from a torchrun script?)"
                                  : "unset " + row.variable;
      CHECK_THAT(what, Catch::EndsWith("; " + fix + ": Slurm numbers the nodes"));
    }
  }
  // Per-task mode: every task of a node has its SLURM_NODEID.
  auto env = step_env(1);
  env["SLURM_STEP_NUM_TASKS"] = "4";
  env["SLURM_STEP_TASKS_PER_NODE"] = "2(x2)";
  env["SLURM_PROCID"] = "2";
  auto o = cmd();
  o.node_rank = 0;
  CHECK_THROWS_WITH(resolve(o, env, sys()), Catch::StartsWith("--node-rank 0 disagrees with SLURM_NODEID=1"));
}

TEST_CASE("a node rank in a batch script would reach every node's agent: refused there",
          "[config][slurm][error]") {
  EnvSnapshot env = {{"SLURM_JOB_ID", "77"},
                     {"SLURM_JOB_NODELIST", "node[1-3]"},
                     {"SLURM_NNODES", "3"},
                     {"SLURM_JOB_NUM_NODES", "3"},
                     {"SLURM_NODEID", "0"},
                     {"SLURM_NTASKS", "3"},
                     {"SLURM_TASKS_PER_NODE", "1(x3)"}};
  auto o = cmd();
  o.node_rank = 0;
  CHECK_THROWS_WITH(resolve(o, env, sys()),
                    Catch::StartsWith("--node-rank 0 would reach the agent on every node this batch script "
                                      "starts ddprun on (3 nodes)") &&
                        Catch::EndsWith("; drop --node-rank: Slurm numbers the nodes"));
  o.node_rank = 2;
  o.from_variable["--node-rank"] = "PET_NODE_RANK";
  CHECK_THROWS_WITH(resolve(o, env, sys()), Catch::StartsWith("PET_NODE_RANK=2 would reach"));
  // One node: node rank 0 is the only one, and its SLURM_NODEID.
  env["SLURM_JOB_NODELIST"] = "node1";
  env["SLURM_NNODES"] = env["SLURM_JOB_NUM_NODES"] = env["SLURM_NTASKS"] = "1";
  env["SLURM_TASKS_PER_NODE"] = "1";
  o.node_rank = 0;
  CHECK(resolve(o, env, sys()).context == SlurmContext::batch);
  o.node_rank = 1;
  CHECK_THROWS_WITH(resolve(o, env, sys()), Catch::StartsWith("PET_NODE_RANK=1 would reach"));
}

TEST_CASE("local address: node 0's is MASTER_ADDR, the store's endpoint stays, --master-addr wins",
          "[config][iface]") {
  auto o = cmd();
  o.local_addr = "10.20.0.1";
  auto r = resolve(o, step_env(0), sys());
  CHECK(r.local_addr == "10.20.0.1");
  CHECK(r.job.master_addr == "10.20.0.1");
  CHECK(r.rdzv_host == "node1");  // the agents still meet at the endpoint they have
  o.local_addr = "10.20.0.2";
  r = resolve(o, step_env(1), sys());
  CHECK(r.local_addr == "10.20.0.2");
  CHECK(r.job.master_addr == "node1");  // not node 0: node 0's comes with the published plan
  o.local_addr = "10.20.0.1";
  o.master_addr = "10.99.0.1";
  CHECK(resolve(o, step_env(0), sys()).job.master_addr == "10.99.0.1");
  // --rdzv-iface alone sets nothing here: the launcher looks the interface up (set_local_addr).
  auto i = cmd();
  i.rdzv_iface = "ib0";
  r = resolve(i, step_env(0), sys());
  CHECK(r.rdzv_iface == "ib0");
  CHECK(r.addr_option == "--rdzv-iface ib0");  // what a warning about the addresses names
  CHECK(r.local_addr.empty());
  CHECK(r.job.master_addr == "node1");
  i.from_variable["--rdzv-iface"] = "DDPRUN_RDZV_IFACE";
  CHECK(resolve(i, step_env(0), sys()).addr_option == "DDPRUN_RDZV_IFACE=ib0");
  CHECK(resolve(o, step_env(0), sys()).addr_option == "--local-addr 10.20.0.1");
  CHECK(resolve(cmd(), step_env(0), sys()).addr_option.empty());
  set_local_addr(r, "fd00::1");
  CHECK(r.job.master_addr == "fd00::1");
}

TEST_CASE("local address: bad combinations are one-line errors", "[config][iface][error]") {
  auto o = cmd();
  o.rdzv_iface = "ib0";
  o.local_addr = "10.0.0.1";
  CHECK_THROWS_WITH(resolve(o, step_env(0), sys()),
                    "--rdzv-iface ib0 and --local-addr 10.0.0.1 both choose this node's address; give one");
  o.rdzv_iface.reset();
  o.local_addr = "";
  CHECK_THROWS_WITH(resolve(o, step_env(0), sys()), Catch::StartsWith("--local-addr is empty"));
  o.local_addr.reset();
  o.rdzv_iface = "";
  CHECK_THROWS_WITH(resolve(o, step_env(0), sys()), Catch::StartsWith("--rdzv-iface is empty"));
  EnvSnapshot batch = {{"SLURM_JOB_ID", "77"},          {"SLURM_JOB_NODELIST", "node[1-3]"},
                       {"SLURM_NODELIST", "node[1-3]"}, {"SLURM_JOB_NUM_NODES", "3"},
                       {"SLURM_NNODES", "3"},           {"SLURM_NODEID", "0"}};
  auto b = cmd();
  b.local_addr = "10.0.0.1";
  CHECK_THROWS_WITH(resolve(b, batch, sys()), Catch::Contains("use --rdzv-iface IFACE"));
  b.local_addr.reset();
  b.rdzv_iface = "ib0";
  CHECK(resolve(b, batch, sys()).rdzv_iface == "ib0");
}

TEST_CASE("no-progress limit and requeue codes: checked before anything starts", "[config]") {
  auto o = cmd();
  o.max_restarts_without_progress = 1;
  o.requeue_on = "140,143,200-210";
  o.max_requeues = 0;
  const auto r = resolve(o, {}, sys());
  CHECK(r.requeue_on.size() == 13);
  CHECK(r.requeue_on.count(205) == 1);
  CHECK(r.max_requeues == 0);
  o.max_restarts_without_progress = 0;
  CHECK_THROWS_WITH(resolve(o, {}, sys()),
                    "--max-restarts-without-progress 0 must be at least 1 (leave it out for no limit)");
  o.max_restarts_without_progress.reset();
  o.max_requeues = -1;
  CHECK_THROWS_WITH(resolve(o, {}, sys()), "--max-requeues -1 is negative; give 0 or more");
  o.max_requeues = 1;
  o.requeue_on = "140,300";
  CHECK_THROWS_WITH(resolve(o, {}, sys()),
                    Catch::Contains("--requeue-on '140,300': '300' is not an exit code"));
}
