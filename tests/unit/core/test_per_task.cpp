// Per-task mode's relay decisions: who speaks for a node, where the node-local store listens.
#include <catch2/catch.hpp>

#include <set>

#include "core/config.hpp"
#include "core/error.hpp"
#include "core/per_task.hpp"

using namespace ddprun::core;

TEST_CASE("task_place: local task 0 relays for its node, node 0's relay serves the job's store") {
  struct Row {
    std::vector<int> tasks;
    int node, local;
    bool relay, node0, node_store;
    int local_tasks;
  };
  const std::vector<Row> rows = {
      {{4, 4}, 0, 0, true, true, true, 4},    // node 0
      {{4, 4}, 0, 3, false, false, true, 4},  // a task beside node 0
      {{4, 4}, 1, 0, true, false, true, 4},   // another node's relay
      {{4, 4}, 1, 2, false, false, true, 4},
      {{2, 1}, 1, 0, true, false, false, 1},  // alone on its node: no node-local store
      {{1}, 0, 0, true, true, false, 1},
  };
  for (const auto& r : rows) {
    CAPTURE(r.tasks, r.node, r.local);
    const TaskPlace p = task_place(r.tasks, r.node, r.local);
    CHECK(p.node == r.node);
    CHECK(p.local == r.local);
    CHECK(p.relay == r.relay);
    CHECK(p.node0 == r.node0);
    CHECK(p.node_store == r.node_store);
    CHECK(p.local_tasks == r.local_tasks);
  }
}

TEST_CASE("task_place: a node or local id outside the layout is a usage error naming the variable") {
  CHECK_THROWS_WITH(task_place({2, 2}, 2, 0), Catch::Contains("SLURM_NODEID=2"));
  CHECK_THROWS_WITH(task_place({2, 2}, -1, 0), Catch::Contains("SLURM_NODEID=-1"));
  CHECK_THROWS_WITH(task_place({2, 1}, 1, 1), Catch::Contains("SLURM_LOCALID=1"));
  CHECK_THROWS_AS(task_place({}, 0, 0), Error);
}

TEST_CASE("node_store_port: the same for every task of a node, different across nodes and steps") {
  const auto p = node_store_port("77.0", 1, 21000, 21001);
  CHECK(p == node_store_port("77.0", 1, 21000, 21001));
  CHECK(p >= 20000);
  CHECK(p <= 32767);
  // Nodes sharing one host (the test cluster) and concurrent steps must not meet.
  std::set<std::uint16_t> ports;
  for (int node = 0; node < 64; ++node) ports.insert(node_store_port("77.0", node, 21000, 21001));
  CHECK(ports.size() >= 63);  // hashing: one clash in 64 would already be unlucky
  CHECK(node_store_port("77.1", 1, 21000, 21001) != p);
}

TEST_CASE("node_store_port: never the job store's port nor the workers' master port") {
  const auto p = node_store_port("9.0", 0, 0, 0);
  // Ask again with exactly that port taken by the store, then by the master port.
  const auto q = node_store_port("9.0", 0, p, 0);
  const auto r = node_store_port("9.0", 0, 0, p);
  CHECK(q != p);
  CHECK(r != p);
  const auto s = node_store_port("9.0", 0, p, q);
  CHECK(s != p);
  CHECK(s != q);
  // And with the ports a Slurm step derives.
  const DerivedPorts d = derive_ports("9.0");
  const auto t = node_store_port("9.0", 0, d.store, d.master);
  CHECK(t != d.store);
  CHECK(t != d.master);
}
