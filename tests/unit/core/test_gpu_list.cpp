// GpuList (core/gpu_list.hpp): a node's GPU ids, shared between copies. It must read and compare
// as the vector it replaces, and the tables a large job builds must hold one list, not one a node.
#include <catch2/catch.hpp>

#include "core/config.hpp"
#include "core/gpu_list.hpp"
#include "core/plan_table.hpp"

using namespace ddprun::core;

TEST_CASE("GpuList reads and compares as its ids", "[gpu_list]") {
  const std::vector<std::string> ids{"0", "1", "3"};
  const GpuList l(ids);
  CHECK(l.size() == 3);
  CHECK_FALSE(l.empty());
  CHECK(l[2] == "3");
  CHECK(l.front() == "0");
  CHECK(l == ids);
  CHECK(ids == l);
  CHECK(l.ids() == ids);
  CHECK(std::vector<std::string>(l.begin(), l.end()) == ids);
  const std::vector<std::string>& as_vector = l;
  CHECK(as_vector == ids);
  // Equal ids are equal lists, shared or not; different ids are not.
  CHECK(GpuList(ids) == l);
  CHECK_FALSE(GpuList({"0", "1"}) == l);
  CHECK_FALSE(GpuList() == l);
}

TEST_CASE("An empty GpuList holds nothing and equals every empty list", "[gpu_list]") {
  const GpuList none;
  CHECK(none.empty());
  CHECK(none.size() == 0);
  CHECK(none.begin() == none.end());
  CHECK(none == GpuList(std::vector<std::string>{}));
  CHECK(none == std::vector<std::string>{});
  CHECK_FALSE(none.shares_with(GpuList()));
}

TEST_CASE("Copies of a GpuList share its ids", "[gpu_list]") {
  const GpuList a({"0", "1", "2", "3", "4", "5", "6", "7"});
  const GpuList b = a;  // NOLINT(performance-unnecessary-copy-initialization): the copy is the point
  CHECK(b.shares_with(a));
  CHECK(&b.ids() == &a.ids());
  CHECK_FALSE(GpuList(a.ids()).shares_with(a));  // a new list from the same ids is its own
}

TEST_CASE("A node table shares one GPU list between alike nodes, also decoded", "[gpu_list]") {
  JobSpec job;
  job.mode = Mode::agent;
  job.nnodes = 64;
  std::vector<NodeSpec> nodes;
  const GpuList eight({"0", "1", "2", "3", "4", "5", "6", "7"});
  for (int i = 0; i < job.nnodes; ++i) {
    NodeSpec n;
    n.node_rank = i;
    n.host = "node" + std::to_string(i + 1);
    n.addr = *n.host;
    n.local_world_size = 8;
    n.gpus = eight;
    nodes.push_back(n);
  }
  const PlanTable t = make_plan_table(job, nodes);
  for (const auto& row : t.nodes) CHECK(row.gpus.shares_with(eight));
  const PlanTable d = decode_plan_table(encode_plan_table(t));
  CHECK(d == t);
  for (const auto& row : d.nodes) CHECK(row.gpus.shares_with(d.nodes.front().gpus));
}
