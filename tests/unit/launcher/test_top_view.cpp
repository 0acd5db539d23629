// `ddprun top`'s views (launcher/observe/top_view.hpp): the order of the ranks, the JSON object's
// fields, the text table, cutting to the terminal.
#include <catch2/catch.hpp>

#include <algorithm>

#include "core/config.hpp"
#include "core/elastic.hpp"
#include "launcher/observe/job_locator.hpp"
#include "launcher/observe/top_view.hpp"

using namespace ddprun;
using namespace ddprun::launcher;

namespace {

core::RankStatus rank(int r, core::RankState s, std::optional<double> age, std::string line = "") {
  core::RankStatus x;
  x.rank = r;
  x.local_rank = r % 2;
  x.pid = 1000 + r;
  x.state = s;
  x.progress_age = age;
  x.last_line = std::move(line);
  x.run_seconds = 10;
  if (s == core::RankState::exited || s == core::RankState::stopped) x.exit_code = 0;
  return x;
}

std::vector<core::NodeStatus> two_nodes(std::int64_t published) {
  core::NodeStatus a;
  a.node_rank = 0;
  a.host = "node-a";
  a.agent_state = "running";
  a.published_ms = published;
  a.world_size = 4;
  a.nnodes = 2;
  a.ranks = {rank(0, core::RankState::running, 0.2, "step 5"),
             rank(1, core::RankState::exited, std::nullopt)};
  core::NodeStatus b = a;
  b.node_rank = 1;
  b.host = "node-b";
  b.ranks = {rank(2, core::RankState::running, 9.0, "loading"), rank(3, core::RankState::hung, 30.0, "x")};
  return {a, b};
}

}  // namespace

TEST_CASE(
    "top: ranks slowest first (hung, then live by silence, then ended), silence grows with the record's "
    "age") {
  const auto nodes = two_nodes(1000000);
  const auto ranks = ranks_slowest_first(nodes, 1002000);  // the records are 2 s old
  REQUIRE(ranks.size() == 4);
  CHECK(ranks[0].status.rank == 3);
  CHECK(ranks[1].status.rank == 2);
  CHECK(ranks[2].status.rank == 0);
  CHECK(ranks[3].status.rank == 1);
  CHECK(*ranks[1].seconds_since_progress == Approx(11.0));
  CHECK(*ranks[2].seconds_since_progress == Approx(2.2));
  CHECK_FALSE(ranks[3].seconds_since_progress);  // ended: no silence
  // A clock behind the agent's never makes the figure smaller.
  CHECK(*ranks_slowest_first(nodes, 999000)[1].seconds_since_progress == Approx(9.0));
}

TEST_CASE("top: the JSON object has the job, the nodes and every rank by rank with the issue's fields") {
  const auto j = top_json(two_nodes(1000000), "127.0.0.1:29400", "demo", 1000500);
  CHECK(j["job"]["world_size"] == 4);
  CHECK(j["job"]["nnodes"] == 2);
  CHECK(j["job"]["nodes_reporting"] == 2);
  CHECK(j["job"]["run_id"] == "demo");
  REQUIRE(j["ranks"].size() == 4);
  for (std::size_t r = 0; r < 4; ++r) {
    const auto& x = j["ranks"][r];
    CHECK(x["rank"] == static_cast<int>(r));
    for (const char* key : {"rank", "local_rank", "node_rank", "host", "pid", "state", "last_line",
                            "seconds_since_progress", "rss_bytes", "cpu_percent", "step", "restarts"}) {
      CAPTURE(key);
      CHECK(x.contains(key));
    }
  }
  CHECK(j["ranks"][2]["host"] == "node-b");
  CHECK(j["ranks"][2]["node_rank"] == 1);
  CHECK(j["ranks"][2]["seconds_since_progress"] == Approx(9.5));
  CHECK(j["ranks"][1]["state"] == "exited");
  CHECK(j["ranks"][1]["exit_code"] == 0);
  CHECK(j["nodes"][1]["status_age_s"] == Approx(0.5));
}

TEST_CASE("top: the text view, per rank and per node, cut to the terminal") {
  const auto nodes = two_nodes(1000000);
  const std::string ranks = top_text(nodes, "127.0.0.1:29400 (--rdzv-id demo)", 1000000, false);
  CHECK_THAT(ranks, Catch::Contains("world size 4  nodes 2/2 reporting"));
  const auto header = ranks.find("LAST LINE\n");
  REQUIRE(header != std::string::npos);
  CHECK_THAT(ranks.substr(header + 10), Catch::StartsWith("    3    1 node-b"));
  const std::string by_node = top_text(nodes, "t", 1000000, true);
  CHECK_THAT(by_node, Catch::Contains("AGENT") && Catch::Contains("node-b"));
  const std::string small = top_text(nodes, "t", 1000000, false, 20, 5);
  std::size_t lines = 0, start = 0;
  while (start < small.size()) {
    const auto nl = small.find('\n', start);
    CHECK(nl - start <= 20);
    start = nl + 1;
    ++lines;
  }
  CHECK(lines == 5);
  CHECK(fit_columns("caf\xC3\xA9 ok", 4) == "caf\xC3\xA9");  // columns, not bytes
  CHECK(fit_columns("abc", 0) == "abc");
}

TEST_CASE("top: the job is named by --rdzv-endpoint and --rdzv-id, both required") {
  JobQuery q;
  CHECK_THROWS_WITH(locate_job(q), Catch::Contains("--rdzv-endpoint HOST:PORT and --rdzv-id ID"));
  q.rdzv_endpoint = "node-a:1234";
  CHECK_THROWS(locate_job(q));
  q.rdzv_id = "demo";
  const auto t = locate_job(q);
  CHECK(t.host == "node-a");
  CHECK(t.port == 1234);
  CHECK(t.run_id == "demo");
  q.rdzv_endpoint = "node-a";
  CHECK(locate_job(q).port == 29400);
  q.rdzv_endpoint = "node-a:notaport";
  CHECK_THROWS(locate_job(q));
}

TEST_CASE("top under Slurm: the steps squeue lists, the newest ddprun step, never top's own") {
  const std::string out =
      "12.batch|batch|node1\n"
      "12.extern|extern|node[1-2]\n"
      "12.0|ddprun|node[1-2]\n"
      "12.1|python3|node3\n"
      "12.3|ddprun|node[2-3]\n"
      "12.10|ddprun|node1\n"
      "garbage\n";
  const auto steps = parse_squeue_steps(out);
  REQUIRE(steps.size() == 4);
  CHECK(steps[0].job_id == "12");
  CHECK(steps[0].step_id == "0");
  CHECK(steps[0].nodelist == "node[1-2]");
  CHECK(choose_step(steps, std::nullopt)->step_id == "10");       // numerically newest, not "3" > "10"
  CHECK(choose_step(steps, std::nullopt, "10")->step_id == "3");  // `srun ddprun top` is step 10
  CHECK(choose_step(steps, std::string("1"))->name == "python3");
  CHECK_FALSE(choose_step(steps, std::string("7")));
  CHECK(choose_step(parse_squeue_steps("12.4|python3|n1\n"), std::nullopt)->step_id ==
        "4");  // no ddprun step
  CHECK_FALSE(choose_step({}, std::nullopt));
}

TEST_CASE("top under Slurm: the store's places, as the agents derive them") {
  const SlurmStep step{"12", "3", "ddprun", "node[2-3]"};
  const auto t = slurm_targets(step, std::nullopt);
  REQUIRE(t.size() == 2 * (1 + core::kStorePortFallbacks));
  CHECK(t[0].host == "node2");  // node rank 0: the step's first host
  CHECK(t[0].port == core::derive_ports("12.3").store);
  CHECK(t[0].run_id == "12.3");
  CHECK(t[1].port == core::store_port_fallbacks("12.3").front());
  CHECK(t[8].port == core::derive_ports("12").store);  // a self-launch plans with the job id
  CHECK(t[8].run_id == "12");
  CHECK(t[0].master_port == core::derive_ports("12.3").master);  // the workers' store, a failover skips it
  const auto resv = slurm_targets(step, core::ReservedPorts{4000, 4001});
  CHECK(resv[0].port == 4000);  // srun --resv-ports: the first reserved port, no fallbacks
  CHECK(resv[0].master_port == 4001);
  CHECK(resv[1].run_id == "12");
  CHECK(slurm_targets(step, core::ReservedPorts{4000, std::nullopt})[0].master_port ==
        core::derive_ports("12.3").master);
  const auto named = slurm_targets(step, std::nullopt, std::string("myrun"));
  CHECK(named[0].run_id == "myrun (step 12.3)");
  CHECK(named[0].step_run == "12.3");
  CHECK(named[8].run_id == "myrun (step 12)");  // as a self-launch's agents serve it (core::store_run_id)
  CHECK(named[8].step_run == "12");
}

TEST_CASE("top under Slurm: where a node-0 failover moves the store, on every node of the step") {
  const JobTarget step_base{"node2", 20000, "12.3", {}, "12.3", {}, 20005};
  const JobTarget job_base{"node2", 30000, "12", {}, "12", {}, 0};
  const auto t = failover_targets({"node2", "node3", "node4"}, {step_base, job_base});
  REQUIRE(t.size() == 2 * 3 * (kMaxFailovers + 1));
  // By base, then port, then host; every port from base+1 to base+kMaxFailovers+1 (MASTER_PORT skipped
  // or not: core::failover_port gives base+g or base+g+1), the planned MASTER_PORT last of all.
  CHECK(t[0].host == "node2");
  CHECK(t[0].port == 20001);
  CHECK(t[1].host == "node3");
  CHECK(t[1].port == 20001);
  CHECK(t[3].port == 20002);
  CHECK(t[12].port == 20006);  // 20005 is MASTER_PORT
  CHECK(t[3 * kMaxFailovers - 1].port == 20000 + kMaxFailovers + 1);
  CHECK(t[3 * kMaxFailovers].port == 30001);
  CHECK(t[3 * kMaxFailovers].run_id == "12");
  for (std::size_t i = t.size() - 3; i < t.size(); ++i) CHECK(t[i].port == 20005);
  for (const auto& x : t) CHECK(x.step_run == x.run_id);
  for (int g = 1; g <= kMaxFailovers; ++g) {
    for (const int master : {20001, 20005, 40000}) {
      const auto p = static_cast<std::uint16_t>(core::failover_port(20000, g, master));
      CHECK(std::any_of(t.begin(), t.end(), [&](const JobTarget& x) { return x.port == p; }));
    }
  }
  // Never past the last port.
  CHECK(failover_targets({"n"}, {JobTarget{"n", 65534, "r", {}, {}, {}, 0}}).size() == 1);
}

TEST_CASE("top: the run id a refusing store serves, and whether it is the Slurm step's") {
  const std::string refusal =
      "the rendezvous store at node1:20000 refused this agent: run id mismatch: this store serves run 'myrun "
      "(step 12.3)', the client belongs to run '12.3': another job or Slurm step (JOBID.STEPID) reached this "
      "port; check --rdzv-id and the endpoint";
  CHECK(served_run_id(refusal, "12.3") == "myrun (step 12.3)");
  CHECK_FALSE(served_run_id(refusal, "12.4"));  // not the refusal of our hello
  CHECK_FALSE(served_run_id("authentication failed: wrong token", "12.3"));
  // An id holding the delimiters still comes back whole.
  CHECK(served_run_id(
            "this store serves run 'a', the client belongs to run 'b'', the client belongs to run 'c'",
            "c") == "a', the client belongs to run 'b'");
  CHECK(serves_step("myrun (step 12.3)", "12.3"));
  CHECK(serves_step("12.3", "12.3"));
  CHECK(serves_step("x (step 12)", "12"));
  CHECK_FALSE(serves_step("myrun (step 12.30)", "12.3"));
  CHECK_FALSE(serves_step("myrun (step 12.3)", "12"));
  CHECK_FALSE(serves_step(" (step 12.3)", "12.3"));
  CHECK_FALSE(serves_step("myrun", ""));  // outside Slurm: no step to recognise
}

TEST_CASE("top under Slurm: nodes' addresses from scontrol show node -o") {
  const std::string out =
      "NodeName=node1 Arch=x86_64 CoresPerSocket=1 NodeAddr=127.0.1.1 NodeHostName=node1 Version=22.05.8\n"
      "NodeName=node2 Arch=x86_64 NodeAddr=10.0.0.2 NodeHostName=node2\n"
      "NodeName=gpu7 Arch=x86_64 NodeAddr=gpu7 NodeHostName=gpu7\n"  // NodeAddr is the name: no help
      "garbage line\n"
      "NodeName=node9 Arch=x86_64\n";
  const auto a = parse_node_addrs(out);
  CHECK(a.size() == 2);
  CHECK(a.at("node1") == "127.0.1.1");
  CHECK(a.at("node2") == "10.0.0.2");
  CHECK(a.count("gpu7") == 0);
  CHECK(parse_node_addrs("").empty());
}
