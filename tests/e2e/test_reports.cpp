// What a multi-node job leaves for the user: one error report per node (never one node's report
// over another's).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "e2e/job.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

nlohmann::json read_json(const std::string& path) {
  const std::string text = read_file(path);
  INFO(path);
  REQUIRE_FALSE(text.empty());
  return nlohmann::json::parse(text);
}

// Rank 3 (node 1) exits 7 once every rank has started; the others wait to be torn down.
std::vector<std::string> rank3_fails() {
  return sh(
      "touch \"$DIR/ready_$RANK\"; if [ \"$RANK\" = 3 ]; then "
      "for i in $(seq 1 3000); do [ $(ls \"$DIR\" | grep -c ready_) -ge 4 ] && break; sleep 0.01; done; "
      "exit 7; fi; exec " +
      kFake + " hang");
}

}  // namespace

TEST_CASE("error file with two nodes: each node writes its own report", "[e2e][logs]") {
  Job job;
  job.start(2, 2, rank3_fails(), {"--error-file", job.dir / "err.json", "--log-dir", job.dir / "logs"});
  job.wait_all();
  for (int node = 0; node < 2; ++node) {
    INFO(job.agents[static_cast<std::size_t>(node)].err());
    CHECK(job.agents[static_cast<std::size_t>(node)].code == 7);
    const auto j = read_json(job.dir / ("err.node" + std::to_string(node) + ".json"));
    CHECK(j.at("node_rank") == node);
    CHECK(j.at("exit_code") == 7);
    CHECK(j.at("root_cause").at("rank") == 3);
    CHECK(j.at("workers").size() == 2);
    CHECK(j.at("workers").at(0).at("rank") == 2 * node);  // this node's own workers
  }
  CHECK_FALSE(std::ifstream(job.dir / "err.json").good());  // no shared path for the last writer to win
  CHECK(leftovers_after(job.token, 5s).empty());
}

TEST_CASE("error file with {node_rank} and the default in the log dir: one file per node", "[e2e][logs]") {
  Job job;
  job.start(2, 2, rank3_fails(), {"--error-file", job.dir / "report-{node_rank}.json"});
  job.wait_all();
  for (int node = 0; node < 2; ++node) {
    const auto j = read_json(job.dir / ("report-" + std::to_string(node) + ".json"));
    CHECK(j.at("node_rank") == node);
    CHECK(j.at("root_cause").at("rank") == 3);
  }
  Job logs;
  logs.start(2, 2, rank3_fails(), {"--log-dir", logs.dir / "logs"});
  logs.wait_all();
  for (int node = 0; node < 2; ++node) {
    const auto j = read_json(logs.dir / ("logs/attempt_0/error_node_" + std::to_string(node) + ".json"));
    CHECK(j.at("node_rank") == node);
  }
  CHECK(std::ifstream(logs.dir / "logs/attempt_0/rank_3/stdout.log").good());
}
