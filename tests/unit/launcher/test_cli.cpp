// The command line of the application layer: what parse_cli puts into core::Options.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <set>

#include "agent/error.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "launcher/agent_options.hpp"
#include "launcher/cli.hpp"

using ddprun::launcher::CliResult;
using ddprun::launcher::parse_cli;

namespace {

CliResult parse(std::vector<const char*> args) {
  args.insert(args.begin(), "ddprun");
  return parse_cli(static_cast<int>(args.size()), args.data());
}

}  // namespace

TEST_CASE("cli: options not given stay unset, given ones are set", "[cli]") {
  auto o = parse({"true"}).options;
  CHECK_FALSE(o.nnodes);
  CHECK_FALSE(o.nproc_per_node);
  CHECK_FALSE(o.node_rank);
  CHECK_FALSE(o.rdzv_timeout);
  CHECK_FALSE(o.prefix);
  CHECK_FALSE(o.log_dir);
  CHECK(o.command == std::vector<std::string>{"true"});
  o = parse({"--nnodes", "1:4", "--node-rank", "0", "--rdzv-timeout", "2.5", "--prefix", "", "--max-restarts",
             "3", "--master-port", "1234", "--log-dir", "/tmp/x", "--", "-cmd", "a"})
          .options;
  CHECK(o.nnodes == "1:4");
  CHECK(o.node_rank == 0);
  CHECK(o.rdzv_timeout == 2.5);
  CHECK(o.prefix == "");  // given, even though empty
  CHECK(o.max_restarts == 3);
  CHECK(o.master_port == "1234");
  CHECK(o.log_dir == "/tmp/x");
  CHECK(o.command == std::vector<std::string>{"-cmd", "a"});
}

TEST_CASE("cli: DDPRUN_* variables fill options the flags leave unset", "[cli]") {
  ::setenv("DDPRUN_NPROC_PER_NODE", "3", 1);
  ::setenv("DDPRUN_RDZV_TIMEOUT", "7", 1);
  auto o = parse({"--nproc-per-node", "2", "true"}).options;
  ::unsetenv("DDPRUN_NPROC_PER_NODE");
  ::unsetenv("DDPRUN_RDZV_TIMEOUT");
  CHECK(o.nproc_per_node == "2");
  CHECK(o.rdzv_timeout == 7.0);
}

TEST_CASE("cli: torchrun's -t and -r levels turn on --tee unless 0", "[cli]") {
  CHECK_FALSE(parse({"-t", "0", "-r", "0", "true"}).options.tee);
  CHECK(parse({"-t", "3", "true"}).options.tee);
  CHECK(parse({"--redirects", "1", "true"}).options.tee);
  CHECK(parse({"--rdzv-backend", "c10d", "--monitor-interval", "5", "true"}).options.command ==
        std::vector<std::string>{"true"});
  CHECK_THROWS_AS(parse({"--monitor-interval", "soon", "true"}), ddprun::core::Error);
  CHECK_THROWS_WITH(parse({"--bogus", "true"}), Catch::Contains("unknown flag '--bogus'"));
}

TEST_CASE("cli: torchrun 1.13's long forms: --tee LEVEL, --start_method, --run_path", "[cli][torchrun]") {
  auto o = parse({"--tee", "3", "--log_dir", "/tmp/l", "echo", "ok"}).options;
  CHECK(o.tee);
  CHECK(o.log_dir == "/tmp/l");
  CHECK(o.command == std::vector<std::string>{"echo", "ok"});
  CHECK_FALSE(parse({"--tee", "0", "echo"}).options.tee);
  CHECK(parse({"--tee", "0:0,1:3", "echo"}).options.tee);
  CHECK_FALSE(parse({"--tee", "0:0,1:0", "echo"}).options.tee);
  o = parse({"--tee", "train.py", "3"}).options;  // a plain --tee never takes the command
  CHECK(o.tee);
  CHECK(o.command == std::vector<std::string>{"train.py", "3"});
  o = parse({"echo", "--tee", "3"}).options;  // after the command, it is the command's
  CHECK_FALSE(o.tee);
  CHECK(o.command == std::vector<std::string>{"echo", "--tee", "3"});
  CHECK(parse({"--prefix", "--tee", "echo"}).options.prefix == "--tee");
  CHECK_THROWS_WITH(parse({"--tee=loud", "echo"}), Catch::Contains("--tee 'loud' is not a torchrun level"));
  o = parse({"--start_method", "fork", "--run_path", "--no_python", "t.py"}).options;
  CHECK(o.run_path);
  CHECK_FALSE(o.no_python);
  CHECK(parse({"--start-method", "spawn", "--run-path", "echo"}).options.command ==
        std::vector<std::string>{"echo"});
  CHECK_THROWS_WITH(parse({"--start_method", "thread", "echo"}), Catch::Contains("--start-method: thread"));
}

TEST_CASE("cli: a repeated option takes the last value, as torchrun's argparse", "[cli][torchrun]") {
  auto o = parse({"--nproc_per_node", "2", "--nproc-per-node", "4", "--master_port", "1", "--master-port",
                  "2", "--standalone", "--standalone", "-q", "-q", "echo"})
               .options;
  CHECK(o.nproc_per_node == "4");
  CHECK(o.master_port == "2");
  CHECK(o.standalone);
  CHECK(o.quiet);
  CHECK(parse({"--tee", "3", "--tee", "0", "echo"}).options.tee == false);
  CHECK(parse({"hostlist", "a", "b", "c"}).hostlist->size() == 3);
  CHECK(parse({"echo", "a", "b"}).options.command.size() == 3);
}

TEST_CASE("cli: fixed choices are checked for flags and DDPRUN_* variables alike", "[cli]") {
  CHECK(parse({"--format", "json", "--log-format", "json", "--rdzv-auth", "token", "true"}).options.format ==
        "json");
  CHECK_THROWS_WITH(parse({"--format", "xml", "true"}), Catch::Contains("--format: xml not in {text,json}"));
  CHECK_THROWS_WITH(parse({"--rdzv-auth", "maybe", "true"}), Catch::Contains("--rdzv-auth: maybe"));
  ::setenv("DDPRUN_LOG_FORMAT", "yaml", 1);
  CHECK_THROWS_WITH(parse({"true"}), Catch::Contains("--log-format: yaml not in {text,json}"));
  ::unsetenv("DDPRUN_LOG_FORMAT");
}

TEST_CASE("cli: --cpu-bind takes a mode from the flag or DDPRUN_CPU_BIND, default none", "[cli][cpubind]") {
  CHECK(parse({"true"}).options.cpu_bind == "none");
  CHECK(parse({"--cpu-bind", "gpu", "true"}).options.cpu_bind == "gpu");
  CHECK_THROWS_WITH(parse({"--cpu-bind", "socket", "true"}), Catch::Contains("--cpu-bind: socket not in"));
  ::setenv("DDPRUN_CPU_BIND", "numa", 1);
  CHECK(parse({"true"}).options.cpu_bind == "numa");
  CHECK(parse({"--cpu-bind", "cores", "true"}).options.cpu_bind == "cores");
  ::unsetenv("DDPRUN_CPU_BIND");
}

TEST_CASE("cli: hostlist is a subcommand, but after -- it is a command like any other", "[cli]") {
  auto r = parse({"hostlist", "a[1-2]", "b"});
  REQUIRE(r.hostlist);
  CHECK(*r.hostlist == std::vector<std::string>{"a[1-2]", "b"});
  r = parse({"--nproc-per-node", "2", "--", "hostlist", "a"});
  CHECK_FALSE(r.hostlist);
  CHECK(r.options.command == std::vector<std::string>{"hostlist", "a"});
  CHECK(parse({"train.py", "--lr", "1", "--", "x"}).options.command ==
        std::vector<std::string>{"train.py", "--lr", "1", "--", "x"});
  CHECK_THROWS_WITH(parse({"-weird"}), Catch::Contains("unknown flag '-weird'"));
}

TEST_CASE("agent options: COMMAND as given, checked as the agent checks it", "[cli]") {
  auto o = parse({"-m", "--python", "/opt/py", "--term-timeout", "2.5", "pkg.train", "x"}).options;
  ddprun::core::Resolved r;
  auto a = ddprun::launcher::agent_options(o, r);
  CHECK(a.command == std::vector<std::string>{"pkg.train", "x"});
  CHECK(a.module);
  CHECK_FALSE(a.no_python);
  CHECK(a.python == "/opt/py");
  CHECK(a.term_timeout == std::chrono::milliseconds(2500));
  CHECK_FALSE(a.hang_timeout);  // off unless asked for
  o = parse({"--hang-timeout", "1.5", "true"}).options;
  REQUIRE(ddprun::launcher::agent_options(o, r).hang_timeout);
  CHECK(*ddprun::launcher::agent_options(o, r).hang_timeout == std::chrono::milliseconds(1500));
  CHECK_THROWS(parse({"--hang-timeout", "soon", "true"}));
  o = parse({"--tee", "true"}).options;
  CHECK_THROWS_WITH(ddprun::launcher::agent_options(o, r), Catch::Contains("needs --log-dir"));
  o = parse({"--prefix", "{rnk}", "true"}).options;
  CHECK_THROWS_AS(ddprun::launcher::agent_options(o, r), ddprun::agent::Error);
}

TEST_CASE("cli: PET_* variable names follow torchrun's rule, PET_ + the option's dest", "[cli][torchrun]") {
  // torchrun's dest is its first long name with '-' as '_'; ddprun's -t is torchrun's -t/--tee.
  for (const auto& p : ddprun::launcher::pet_variables()) {
    std::string dest = std::string(p.option) == "-t" ? "--tee" : p.option;
    std::string want = "PET_";
    for (char c : dest.substr(2)) want += c == '-' ? '_' : static_cast<char>(std::toupper(c));
    CHECK(p.variable == want);
  }
}

TEST_CASE("cli: an option reads DDPRUN_<NAME> when set, else PET_<NAME> when set", "[cli][torchrun]") {
  using ddprun::launcher::env_variable_for;
  struct Row {
    std::string ddprun;
    bool ddprun_set;
    bool pet_set;
    std::string reads;
  };
  for (const Row& r : std::vector<Row>{{"DDPRUN_NNODES", true, true, "DDPRUN_NNODES"},
                                       {"DDPRUN_NNODES", true, false, "DDPRUN_NNODES"},
                                       {"DDPRUN_NNODES", false, true, "PET_NNODES"},
                                       {"DDPRUN_NNODES", false, false, "DDPRUN_NNODES"},
                                       {"", false, true, "PET_NNODES"},  // an option with no DDPRUN_ one
                                       {"", false, false, ""}}) {
    CHECK(env_variable_for(r.ddprun, r.ddprun_set, "PET_NNODES", r.pet_set) == r.reads);
  }
}

TEST_CASE("cli: every PET_* variable ddprun reads fills its option, below flags and DDPRUN_*",
          "[cli][torchrun]") {
  const std::vector<std::pair<std::string, std::string>> values = {
      {"PET_NNODES", "1:2"},           {"PET_NPROC_PER_NODE", "3"},    {"PET_NODE_RANK", "1"},
      {"PET_STANDALONE", "1"},         {"PET_ROLE", "trainer"},        {"PET_START_METHOD", "fork"},
      {"PET_RDZV_BACKEND", "c10d"},    {"PET_RDZV_ENDPOINT", "h:1"},   {"PET_RDZV_ID", "j7"},
      {"PET_RDZV_CONF", "a=b"},        {"PET_MASTER_ADDR", "m"},       {"PET_MASTER_PORT", "1234"},
      {"PET_LOCAL_ADDR", "10.20.0.7"}, {"PET_MAX_RESTARTS", "2"},      {"PET_MODULE", "1"},
      {"PET_NO_PYTHON", "1"},          {"PET_RUN_PATH", "0"},          {"PET_TEE", "3"},
      {"PET_REDIRECTS", "0"},          {"PET_LOG_DIR", "/tmp/l"},      {"PET_LOCAL_RANKS_FILTER", "0"},
      {"PET_MONITOR_INTERVAL", "0.1"}, {"PET_VIRTUAL_LOCAL_RANK", "1"}};
  REQUIRE(values.size() == ddprun::launcher::pet_variables().size());
  for (const auto& [var, value] : values) ::setenv(var.c_str(), value.c_str(), 1);
  const auto o = parse({"true"}).options;
  ::setenv("DDPRUN_NPROC_PER_NODE", "2", 1);
  const auto with_ddprun = parse({"--max-restarts", "5", "true"}).options;
  for (const auto& [var, value] : values) ::unsetenv(var.c_str());
  ::unsetenv("DDPRUN_NPROC_PER_NODE");
  CHECK(o.nnodes == "1:2");
  CHECK(o.nproc_per_node == "3");
  CHECK(o.node_rank == 1);
  CHECK(o.standalone);
  CHECK(o.role == "trainer");
  CHECK(o.start_method == "fork");
  CHECK(o.rdzv_endpoint == "h:1");
  CHECK(o.rdzv_id == "j7");
  CHECK(o.master_addr == "m");
  CHECK(o.master_port == "1234");
  CHECK(o.local_addr == "10.20.0.7");
  CHECK(o.max_restarts == 2);
  CHECK(o.module);
  CHECK(o.no_python);
  CHECK(o.tee);
  CHECK(o.log_dir == "/tmp/l");
  CHECK(o.local_ranks_filter == "0");
  CHECK(o.virtual_local_rank);
  CHECK(with_ddprun.nproc_per_node == "2");
  CHECK(with_ddprun.max_restarts == 5);
  CHECK(with_ddprun.rdzv_id == "j7");
}

TEST_CASE("cli: --rdzv-iface and --local-addr: flag > DDPRUN_* (> PET_LOCAL_ADDR)", "[cli][iface]") {
  ::setenv("DDPRUN_RDZV_IFACE", "ib0", 1);
  ::setenv("PET_LOCAL_ADDR", "10.0.0.1", 1);
  ::setenv("DDPRUN_LOCAL_ADDR", "10.0.0.2", 1);
  const auto from_env = parse({"true"}).options;
  const auto from_flags = parse({"--rdzv-iface", "eth1", "--local_addr", "10.0.0.3", "true"}).options;
  ::unsetenv("DDPRUN_LOCAL_ADDR");
  const auto from_pet = parse({"true"}).options;
  ::unsetenv("DDPRUN_RDZV_IFACE");
  ::unsetenv("PET_LOCAL_ADDR");
  CHECK(from_env.rdzv_iface == "ib0");
  CHECK(from_env.local_addr == "10.0.0.2");
  CHECK(from_flags.rdzv_iface == "eth1");
  CHECK(from_flags.local_addr == "10.0.0.3");
  CHECK(from_pet.local_addr == "10.0.0.1");
  CHECK_FALSE(parse({"true"}).options.rdzv_iface);
}

TEST_CASE("cli: a bad value from a variable is an error naming the variable", "[cli][torchrun]") {
  ::setenv("PET_MAX_RESTARTS", "abc", 1);
  CHECK_THROWS_WITH(parse({"true"}),
                    Catch::StartsWith("PET_MAX_RESTARTS=abc: Could not convert: --max-restarts"));
  CHECK(parse({"--max-restarts", "1", "true"}).options.max_restarts == 1);  // not read: the flag wins
  ::unsetenv("PET_MAX_RESTARTS");
  ::setenv("PET_START_METHOD", "thread", 1);
  CHECK_THROWS_WITH(parse({"true"}),
                    Catch::StartsWith("PET_START_METHOD=thread: --start-method: thread not in"));
  ::setenv("DDPRUN_START_METHOD", "fork", 1);  // above PET_START_METHOD
  CHECK(parse({"true"}).options.start_method == "fork");
  ::unsetenv("PET_START_METHOD");
  ::unsetenv("DDPRUN_START_METHOD");
  ::setenv("DDPRUN_LOG_FORMAT", "yaml", 1);
  CHECK_THROWS_WITH(parse({"true"}), Catch::StartsWith("DDPRUN_LOG_FORMAT=yaml: --log-format: yaml not in"));
  ::unsetenv("DDPRUN_LOG_FORMAT");
}

namespace {

// A value for each option's variable that the parser takes; `ignored`: an option torchrun has that
// ddprun accepts and ignores, whose value changes nothing but is still read (and checked).
struct Sample {
  std::string option;
  std::string value;
  bool ignored = false;
};

const std::vector<Sample>& samples() {
  static const std::vector<Sample> rows = {
      {"--nnodes", "2"},
      {"--nproc-per-node", "2"},
      {"--node-rank", "1"},
      {"--gpus-per-proc", "2"},
      {"--virtual-local-rank", "1"},
      {"--procs-per-replica", "2"},
      {"--standalone", "1"},
      {"--role", "trainer"},
      {"--cpu-bind", "numa"},
      {"--start-method", "fork"},
      {"--rdzv-endpoint", "h:1"},
      {"--rdzv-id", "j7"},
      {"--rdzv-timeout", "5"},
      {"--rdzv-last-call", "5"},
      {"--master-addr", "m"},
      {"--rdzv-iface", "ib0"},
      {"--local-addr", "10.0.0.7"},
      {"--master-port", "1234"},
      {"--worker-store", "rank0"},
      {"--worker-store-legacy", "2.1"},
      {"--rank-order", "topology"},
      {"--rdzv-backend", "c10d", true},
      {"--rdzv-conf", "a=b", true},
      {"--rdzv-auth", "token"},
      {"--rdzv-token-file", "/tmp/t"},
      {"--max-restarts", "2"},
      {"--max-restarts-without-progress", "3"},
      {"--requeue-on", "143"},
      {"--max-requeues", "2"},
      {"--module", "1"},
      {"--no-python", "1"},
      {"--run-path", "1"},
      {"--python", "/opt/py"},
      {"--local-rank-arg", "dash"},
      {"--use-env", "1", true},
      {"--dry-run", "1"},
      {"--format", "json"},
      {"--term-timeout", "5"},
      {"--hang-timeout", "60"},
      {"--metrics-port", "9100"},
      {"--metrics-all-nodes", "1"},
      {"--health-check", "true"},
      {"--health-check-timeout", "30"},
      {"--prefix", "x "},
      {"--no-prefix", "1"},
      {"--tee", "3"},
      {"--redirects", "1"},
      {"--log-dir", "/tmp/l"},
      {"--local-ranks-filter", "0"},
      {"--error-file", "/tmp/e.json"},
      {"--monitor-interval", "5", true},
      {"--quiet", "1"},
      {"--verbose", "1"},
      {"--log-format", "json"},
  };
  return rows;
}

}  // namespace

TEST_CASE("cli: every option reads its DDPRUN_ variable, by one rule or a listed exception", "[cli][env]") {
  using ddprun::launcher::option_variable_exceptions;
  using ddprun::launcher::option_variables;
  using ddprun::launcher::variable_by_rule;
  CHECK(variable_by_rule("--nproc-per-node") == "DDPRUN_NPROC_PER_NODE");
  CHECK(variable_by_rule("--max-restarts-without-progress") == "DDPRUN_MAX_RESTARTS_WITHOUT_PROGRESS");
  const auto exception = [](const std::string& opt) -> const ddprun::launcher::VariableException* {
    for (const auto& e : option_variable_exceptions())
      if (opt == e.option) return &e;
    return nullptr;
  };
  const auto options = option_variables();
  std::set<std::string> with_variable;
  for (const auto& [opt, var] : options) {
    INFO(opt);
    if (const auto* e = exception(opt)) {
      CHECK(var == e->variable);
      CHECK(std::string(e->why).size() > 10);
    } else {
      CHECK(var == variable_by_rule(opt));  // a new option gets its variable by the rule
    }
    if (!var.empty()) with_variable.insert(opt);
  }
  // Each exception names an option the command line has.
  for (const auto& e : option_variable_exceptions()) {
    INFO(e.option);
    CHECK(std::any_of(options.begin(), options.end(), [&](const auto& ov) { return ov.first == e.option; }));
  }
  // Every option with a variable has a sample below: a new option must be given one, and is then read.
  std::set<std::string> sampled;
  for (const auto& s : samples()) sampled.insert(s.option);
  CHECK(sampled == with_variable);
  const auto defaults = parse({"true"}).options;
  for (const auto& s : samples()) {
    std::string var;
    for (const auto& [opt, v] : options)
      if (opt == s.option) var = v;
    INFO(s.option << " from " << var << "=" << s.value);
    REQUIRE_FALSE(var.empty());
    ::setenv(var.c_str(), s.value.c_str(), 1);
    auto o = parse({"true"}).options;
    ::unsetenv(var.c_str());
    CHECK(o.from_variable == std::map<std::string, std::string>{{s.option, var}});
    o.from_variable.clear();
    if (!s.ignored) CHECK_FALSE(o == defaults);
  }
}

TEST_CASE("cli: an option from a variable is recorded with it, a flag is not, and the flag wins",
          "[cli][env]") {
  ::setenv("DDPRUN_NODE_RANK", "2", 1);
  ::setenv("PET_NNODES", "3", 1);
  ::setenv("DDPRUN_ROLE", "trainer", 1);
  const auto from_env = parse({"--role", "critic", "true"}).options;
  ::unsetenv("DDPRUN_NODE_RANK");
  ::unsetenv("PET_NNODES");
  ::unsetenv("DDPRUN_ROLE");
  CHECK(from_env.node_rank == 2);
  CHECK(from_env.nnodes == "3");
  CHECK(from_env.role == "critic");
  CHECK(from_env.from_variable ==
        std::map<std::string, std::string>{{"--node-rank", "DDPRUN_NODE_RANK"}, {"--nnodes", "PET_NNODES"}});
  CHECK(ddprun::core::given_as(from_env, "--node-rank", "2") == "DDPRUN_NODE_RANK=2");
  CHECK(ddprun::core::given_as(from_env, "--role", "critic") == "--role critic");
  CHECK(parse({"--node-rank", "1", "true"}).options.from_variable.empty());
  // A bad --tee level from its variable names the variable.
  ::setenv("DDPRUN_TEE", "loud", 1);
  CHECK_THROWS_WITH(parse({"true"}), Catch::StartsWith("DDPRUN_TEE 'loud' is not a torchrun level"));
  ::unsetenv("DDPRUN_TEE");
}
