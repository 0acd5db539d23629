// One root cause per job: when several nodes fail at once, or detect a hang at about the same time,
// every node's printed root cause, error file and exit code name the same failure (the first one
// published to the store), and node 0's job summary marks it.
#include <catch2/catch.hpp>

#include <fstream>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "e2e/job.hpp"
#include "support/paths.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

const std::string kHangScript = ddprun_test::source_dir() + "/tests/e2e/hang_worker.py";

nlohmann::json read_json(const std::string& path) {
  const std::string text = read_file(path);
  INFO(path);
  REQUIRE_FALSE(text.empty());
  return nlohmann::json::parse(text);
}

// The rank a text says is the root cause: the "rank : R" line of a report's root cause, or the
// "root cause rank R" of a summary header or of the one line of a node other than 0.
int named_rank(const std::string& text, const std::regex& re) {
  std::smatch m;
  if (!std::regex_search(text, m, re)) return -1;
  return std::stoi(m[1].str());
}

const std::regex kReportRank(R"(Root cause \([^)]*\):\n(?:  [^\n]*\n)*?  rank      : (\d+) )");
const std::regex kHeaderRank(
    R"(ddprun: job summary \(attempt 0\): \w+, exit code \d+, root cause rank (\d+) on )");
const std::regex kLineRank(R"(ddprun: node \d+ \(\S+\): \w+, exit \d+, root cause rank (\d+) on )");

}  // namespace

TEST_CASE(
    "root cause: ranks on three nodes failing at once name one failure on every node, whose code all exit "
    "with",
    "[e2e][root_cause]") {
  // Ranks 1-3 (nodes 1-3) exit 11, 12, 13 when one file appears; rank 0 waits to be torn down.
  const auto cmd = sh("touch \"$DIR/ready_$RANK\"; [ \"$RANK\" = 0 ] && exec " + kFake + " hang; exec " +
                      kFake + " wait-file \"$DIR/go\" exit $((10 + RANK))");
  for (int run = 0; run < 50; ++run) {
    Job job;
    job.start(4, 1, cmd, {"--rdzv-auth", "none", "--error-file", job.dir / "err.json"});
    for (int r = 0; r < 4; ++r) REQUIRE(wait_file(job.dir / ("ready_" + std::to_string(r))));
    std::ofstream(job.dir / "go").close();
    job.wait_all();
    const int code = job.agents[0].code;
    std::ostringstream all;
    for (std::size_t n = 0; n < 4; ++n)
      all << "node " << n << " exit " << job.agents[n].code << ":\n" << job.agents[n].err();
    INFO("run " << run << "\n" << all.str());
    REQUIRE((code == 11 || code == 12 || code == 13));
    const int root = code - 10;  // the rank whose code the job exits with
    const std::string node0 = job.agents[0].err();
    REQUIRE(named_rank(node0, kReportRank) == root);
    REQUIRE(named_rank(node0, kHeaderRank) == root);
    REQUIRE(
        std::regex_search(node0, std::regex(R"(\n +)" + std::to_string(root) + R"(  \S+ +)" +
                                            std::to_string(root) + R"( +rank \d+: exit \d+ <- root cause)")));
    for (std::size_t n = 0; n < 4; ++n) {
      REQUIRE(job.agents[n].code == code);
      const auto j = read_json(job.dir / ("err.node" + std::to_string(n) + ".json"));
      REQUIRE(j.at("exit_code") == code);
      REQUIRE(j.at("root_cause").at("rank") == root);
      if (n > 0) REQUIRE(named_rank(job.agents[n].err(), kLineRank) == root);
    }
    CHECK(leftovers_after(job.token, 5s).empty());
  }
}

TEST_CASE(
    "root cause: nodes that detect a hang at about the same time name one hung rank, marked in the summary",
    "[e2e][root_cause][hang]") {
  // Every rank is silent (rank 1 stuck, the others waiting for it): every node may declare the hang.
  for (int run = 0; run < 3; ++run) {
    Job job;
    job.start(3, 1, {kHangScript, "stuck"},
              {"--hang-timeout", "2", "--python", "/usr/bin/python3", "--rdzv-auth", "none", "--error-file",
               job.dir / "err.json"});
    job.wait_all();
    std::ostringstream all;
    for (std::size_t n = 0; n < 3; ++n)
      all << "node " << n << " exit " << job.agents[n].code << ":\n" << job.agents[n].err();
    INFO("run " << run << "\n" << all.str());
    const std::string node0 = job.agents[0].err();
    const int root = named_rank(node0, kReportRank);
    REQUIRE(root >= 0);
    REQUIRE(named_rank(node0, kHeaderRank) == root);
    REQUIRE(std::regex_search(node0, std::regex(R"(\n +)" + std::to_string(root) + R"(  \S+ +)" +
                                                std::to_string(root) + R"( +rank \d+: hung <- root cause)")));
    for (std::size_t n = 0; n < 3; ++n) {
      REQUIRE(job.agents[n].code == 124);
      const auto j = read_json(job.dir / ("err.node" + std::to_string(n) + ".json"));
      REQUIRE(j.at("root_cause").at("rank") == root);
      if (n > 0) REQUIRE(named_rank(job.agents[n].err(), kLineRank) == root);
    }
    CHECK(leftovers_after(job.token, 5s).empty());
  }
}
