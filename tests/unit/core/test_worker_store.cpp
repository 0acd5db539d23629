// Who serves the workers' store (core/worker_store.hpp, issue 26): the variables each worker gets in
// each mode, the plan that carries the mode, the relay's port, and where node 0 listens.
#include <catch2/catch.hpp>

#include "core/config.hpp"
#include "core/error.hpp"
#include "core/plan_table.hpp"
#include "core/worker_store.hpp"

using namespace ddprun::core;

namespace {

std::vector<NodeSpec> three_nodes() {
  std::vector<NodeSpec> nodes;
  for (int i = 0; i < 3; ++i) {
    NodeSpec n;
    n.node_rank = i;
    n.host = "node" + std::to_string(i);
    n.addr = *n.host;
    n.local_world_size = 2;
    nodes.push_back(n);
  }
  return nodes;
}

JobSpec job_of(WorkerStore ws) {
  JobSpec job;
  job.mode = Mode::agent;
  job.nnodes = 3;
  job.master_addr = "node0";
  job.master_port = 20001;
  job.run_id = "77.3";
  job.worker_store = ws;
  return job;
}

}  // namespace

TEST_CASE("worker store: the parsed names and torch's exact strings", "[worker_store]") {
  CHECK(parse_worker_store("agent") == WorkerStore::agent);
  CHECK(parse_worker_store("rank0") == WorkerStore::rank0);
  CHECK(parse_worker_store("relay") == WorkerStore::relay);
  CHECK_FALSE(parse_worker_store("Agent").has_value());
  CHECK_FALSE(parse_worker_store("").has_value());
  // torch compares with == "True": nothing else turns the agent store on.
  CHECK(std::string(use_agent_store(WorkerStore::agent)) == "True");
  CHECK(std::string(use_agent_store(WorkerStore::relay)) == "True");
  CHECK(std::string(use_agent_store(WorkerStore::rank0)) == "False");
}

TEST_CASE("worker store: each mode's variables, node by node", "[worker_store]") {
  struct Row {
    WorkerStore ws;
    const char* agent_store;
    bool relayed;  // nodes other than 0 reach a relay on 127.0.0.1
  };
  for (const Row& row : {Row{WorkerStore::agent, "True", false}, Row{WorkerStore::rank0, "False", false},
                         Row{WorkerStore::relay, "True", true}}) {
    INFO(to_string(row.ws));
    const PlanTable table =
        decode_plan_table(encode_plan_table(make_plan_table(job_of(row.ws), three_nodes())));
    CHECK(table.job.worker_store == row.ws);
    for (int n = 0; n < 3; ++n) {
      for (const Worker& w : derive_workers(table, n)) {
        INFO("node " << n << " rank " << w.rank);
        CHECK(w.env.at("TORCHELASTIC_USE_AGENT_STORE") == row.agent_store);
        CHECK(w.env.at("TORCHELASTIC_RESTART_COUNT") == "0");
        if (row.relayed && n != 0) {
          CHECK(w.env.at("MASTER_ADDR") == "127.0.0.1");
          CHECK(w.env.at("MASTER_PORT") == std::to_string(relay_port("77.3", n, 20001)));
        } else {
          CHECK(w.env.at("MASTER_ADDR") == "node0");
          CHECK(w.env.at("MASTER_PORT") == "20001");
        }
      }
    }
  }
}

TEST_CASE("worker store: the default mode adds nothing to the published plan", "[worker_store]") {
  const std::string agent = encode_plan_table(make_plan_table(job_of(WorkerStore::agent), three_nodes()));
  CHECK(agent.find("worker_store") == std::string::npos);
  const std::string relay = encode_plan_table(make_plan_table(job_of(WorkerStore::relay), three_nodes()));
  CHECK(relay.find("\nworker_store relay\n") != std::string::npos);
  std::string bad = relay;
  bad.replace(bad.find("worker_store relay"), 18, "worker_store nope!");
  CHECK_THROWS_AS(decode_plan_table(bad), Error);
}

TEST_CASE("worker store: relay ports differ per node, are stable, and avoid MASTER_PORT", "[worker_store]") {
  const auto p1 = relay_port("77.3", 1, 20001);
  CHECK(p1 == relay_port("77.3", 1, 20001));
  CHECK(p1 != relay_port("77.3", 2, 20001));
  CHECK(p1 != relay_port("77.4", 1, 20001));
  CHECK(p1 >= 20000);
  CHECK(p1 <= 32767);
  CHECK(relay_port("77.3", 1, p1) != p1);
}

TEST_CASE("worker store: where node 0 listens", "[worker_store]") {
  const std::vector<std::string> local{"127.0.0.1", "::1", "10.1.2.3", "fe80::1"};
  // MASTER_ADDR is this host's routable address: only there.
  CHECK(worker_store_hosts({"10.1.2.3"}, local, true) == std::vector<std::string>{"10.1.2.3"});
  // A one-node job on loopback: loopback only, nobody off this host can connect.
  CHECK(worker_store_hosts({"127.0.0.1"}, local, false) == std::vector<std::string>{"127.0.0.1"});
  CHECK(worker_store_hosts({"::1", "127.0.0.1"}, local, false) ==
        std::vector<std::string>{"::1", "127.0.0.1"});
  // Several nodes but MASTER_ADDR resolves to loopback here (/etc/hosts' 127.0.1.1): the others reach
  // this host at another address, so every address, with the peer filter.
  CHECK(worker_store_hosts({"127.0.1.1"}, local, true) == std::vector<std::string>{"0.0.0.0"});
  // Not an address of this host (it did not resolve, or to someone else's): every address.
  CHECK(worker_store_hosts({}, local, true) == std::vector<std::string>{"0.0.0.0"});
  CHECK(worker_store_hosts({"10.9.9.9"}, local, false) == std::vector<std::string>{"0.0.0.0"});
  // Loopback and routable: both, each once.
  CHECK(worker_store_hosts({"10.1.2.3", "127.0.1.1", "10.1.2.3"}, local, true) ==
        std::vector<std::string>{"10.1.2.3", "127.0.1.1"});
}

TEST_CASE("worker store: --worker-store is checked, and relay needs agent mode", "[worker_store]") {
  Options o;
  o.command = {"true"};
  o.worker_store = "sometimes";
  CHECK_THROWS_WITH(resolve(o, {}, {}),
                    Catch::Contains("--worker-store sometimes: expected agent, rank0 or relay"));
  o.worker_store = "relay";
  const EnvSnapshot per_task = {
      {"SLURM_JOB_ID", "5"},         {"SLURM_STEP_ID", "0"},        {"SLURM_PROCID", "1"},
      {"SLURM_LOCALID", "1"},        {"SLURM_NODEID", "0"},         {"SLURM_NTASKS", "2"},
      {"SLURM_STEP_NUM_NODES", "1"}, {"SLURM_STEP_NODELIST", "n1"}, {"SLURM_STEP_TASKS_PER_NODE", "2"}};
  CHECK_THROWS_WITH(resolve(o, per_task, {}),
                    Catch::Contains("--worker-store relay needs one ddprun per node"));
  o.worker_store = "agent";
  CHECK(resolve(o, per_task, {}).job.worker_store == WorkerStore::agent);
}
