// What a multi-node job leaves for the user: one error report per node (never one node's report
// over another's), and one job-wide summary on node 0 instead of a report on every node.
#include <catch2/catch.hpp>

#include <fstream>
#include <regex>

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

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

// The lines ddprun itself wrote (worker lines are prefixed "[rank]: ").
std::vector<std::string> ddprun_lines(const std::string& err) {
  std::vector<std::string> out;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("[", 0) != 0) out.push_back(line);
  }
  return out;
}

// One worker per node; rank 1 (node 1) exits 7 once all three have started.
std::vector<std::string> rank1_fails_one_per_node() {
  return sh(
      "touch \"$DIR/ready_$RANK\"; if [ \"$RANK\" = 1 ]; then "
      "for i in $(seq 1 3000); do [ $(ls \"$DIR\" | grep -c ready_) -ge 3 ] && break; sleep 0.01; done; "
      "exit 7; fi; exec " +
      kFake + " hang");
}

std::string fmt_ranks(int node) {
  return "ranks " + std::to_string(2 * node) + "-" + std::to_string(2 * node + 1);
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

TEST_CASE("three nodes fail: node 0 prints the job-wide summary once, the others one line each",
          "[e2e][summary]") {
  Job job;
  job.start(3, 2, rank3_fails(), {"--rdzv-auth", "none"});
  job.wait_all();
  const std::string lead = job.agents[0].err();
  INFO(lead);
  CHECK(job.agents[0].code == 7);
  CHECK(count(lead, "ddprun: job summary (attempt 0): FAILED, exit code 7, root cause rank 3 on ") == 1);
  CHECK(count(lead, "Root cause (first observed failure):") == 1);  // the full report, here only
  CHECK_THAT(lead, !Catch::Contains("ddprun: summary (attempt"));   // no per-node table without --verbose
  static const std::regex kRow0(R"(\n +0  \S+ +0-1 +stopped \* +\d+\.\d\ds\n)");
  static const std::regex kRow1(R"(\n +1  \S+ +2-3 +rank 3: exit 7 <- root cause +\d+\.\d\ds\n)");
  static const std::regex kRow2(R"(\n +2  \S+ +4-5 +stopped \* +\d+\.\d\ds\n)");
  CHECK(std::regex_search(lead, kRow0));
  CHECK(std::regex_search(lead, kRow1));
  CHECK(std::regex_search(lead, kRow2));
  for (int node : {1, 2}) {
    const auto& a = job.agents[static_cast<std::size_t>(node)];
    INFO(a.err());
    CHECK(a.code == 7);
    const auto lines = ddprun_lines(a.err());
    REQUIRE(lines.size() == 1);
    const std::regex one("ddprun: node " + std::to_string(node) +
                         R"( \(\S+\): failed, exit 7, root cause rank 3 on \S+; full report on node 0)");
    CHECK(std::regex_match(lines[0], one));
  }
  CHECK(leftovers_after(job.token, 5s).empty());
}

TEST_CASE("three nodes succeed: one job-wide summary on node 0, one line on the others", "[e2e][summary]") {
  Job job;
  job.start(3, 2, {kFake, "exit", "0"}, {"--rdzv-auth", "none"});
  job.wait_all();
  const std::string lead = job.agents[0].err();
  INFO(lead);
  CHECK(job.agents[0].code == 0);
  CHECK(count(lead, "ddprun: job summary (attempt 0): success, 6 workers on 3 nodes exited 0") == 1);
  CHECK(count(lead, " ok ") == 3);
  for (int node : {1, 2}) {
    const auto& a = job.agents[static_cast<std::size_t>(node)];
    INFO(a.err());
    CHECK(a.code == 0);
    const auto lines = ddprun_lines(a.err());
    REQUIRE(lines.size() == 1);
    CHECK_THAT(lines[0], Catch::StartsWith("ddprun: node " + std::to_string(node) + " (") &&
                             Catch::EndsWith(fmt_ranks(node) + " exited 0; job summary on node 0"));
  }
}

TEST_CASE("with --verbose every node prints its own report and table, node 0 the job summary too",
          "[e2e][summary]") {
  Job job;
  job.start(3, 1, rank1_fails_one_per_node(), {"--rdzv-auth", "none", "--verbose"});
  job.wait_all();
  for (int node = 0; node < 3; ++node) {
    const std::string err = job.agents[static_cast<std::size_t>(node)].err();
    INFO(err);
    CHECK(count(err, "ddprun: job failed with exit code 7") == 1);
    CHECK(count(err, "ddprun: summary (attempt 0, node " + std::to_string(node) + ")") == 1);
    CHECK(count(err, "ddprun: job summary") == (node == 0 ? 1u : 0u));
  }
}

TEST_CASE("json events: every node keeps its own, node 0 adds one job_summary", "[e2e][summary]") {
  Job job;
  job.start(3, 1, rank1_fails_one_per_node(), {"--rdzv-auth", "none", "--log-format", "json"});
  job.wait_all();
  for (int node = 0; node < 3; ++node) {
    const std::string err = job.agents[static_cast<std::size_t>(node)].err();
    INFO(err);
    CHECK(count(err, R"("event":"summary")") == 1);
    CHECK(count(err, R"("event":"failure_report")") == 1);
    CHECK(count(err, R"("event":"job_summary")") == (node == 0 ? 1u : 0u));
  }
  nlohmann::json j;
  for (const auto& line : ddprun_lines(job.agents[0].err())) {
    if (line.find(R"("event":"job_summary")") != std::string::npos) j = nlohmann::json::parse(line);
  }
  REQUIRE(j.is_object());
  CHECK(j.at("nodes_reported") == 3);
  CHECK(j.at("exit_code") == 7);
  REQUIRE(j.at("nodes").size() == 3);
  CHECK(j.at("nodes").at(1).at("failed_rank") == 1);
  CHECK(j.at("root_cause").at("rank") == 1);
}

TEST_CASE("a node whose node 0 is gone prints its full report itself", "[e2e][summary]") {
  Job job;
  job.start(2, 1, sh("touch \"$DIR/ready_$RANK\"; exec " + kFake + " hang"), {"--rdzv-auth", "none"});
  for (int r = 0; r < 2; ++r) REQUIRE(wait_file(job.dir / ("ready_" + std::to_string(r))));
  ::kill(job.agents[0].pid, SIGKILL);
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(wait_for(job.agents[1], 60s));
  CHECK(std::chrono::steady_clock::now() - t0 < 20s);  // the heartbeat, the grace, ~2 s to publish
  INFO(job.agents[1].err());
  CHECK_THAT(job.agents[1].err(), Catch::Contains("Root cause (first observed failure):") &&
                                      Catch::Contains("lost the rendezvous store"));
  CHECK_THAT(job.agents[1].err(), !Catch::Contains("full report on node 0"));
  wait_for(job.agents[0], 5s);
  CHECK(leftovers_after(job.token, 5s).empty());
}

TEST_CASE("the failure report shows a worker's control bytes escaped, never raw", "[e2e][logs]") {
  Job job;
  // A clear-screen sequence, a window title with a bell, a C1 CSI (U+009B) and a byte that is not UTF-8.
  job.start(1, 1,
            sh("printf 'before\\033[2J\\033]0;title\\007 \\302\\233\\061m \\377 after\\n' >&2; exit 3"));
  job.wait_all();
  const std::string err = job.agents[0].err();
  INFO(err);
  CHECK(job.agents[0].code == 3);
  const auto report = err.find("Root cause (first observed failure):");
  REQUIRE(report != std::string::npos);
  const std::string text = err.substr(report);
  CHECK_THAT(text, Catch::Contains("| before\\x1b[2J\\x1b]0;title\\x07 \\xc2\\x9b1m \\xff after"));
  // Nothing below a space but the line ends, no DEL, no C1 control, no byte that is not UTF-8.
  std::size_t raw = 0;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    raw += ((u < 0x20 && c != '\n') || u >= 0x7f) ? 1 : 0;
  }
  CHECK(raw == 0);
}

TEST_CASE("a root cause on another node shows its bytes that are not UTF-8 escaped, as a local one does",
          "[e2e][logs]") {
  Job job;
  // Rank 1 (node 1) writes bytes that are not UTF-8 to stderr once both ranks started, then exits 7.
  job.start(
      2, 1,
      sh("touch \"$DIR/ready_$RANK\"; if [ \"$RANK\" = 1 ]; then "
         "for i in $(seq 1 3000); do [ $(ls \"$DIR\" | grep -c ready_) -ge 2 ] && break; sleep 0.01; done; "
         "printf 'bad \\377\\376 bytes\\n' >&2; exit 7; fi; exec " +
         kFake + " hang"));
  job.wait_all();
  const std::string node0 = job.agents[0].err();
  INFO(node0 << "\nnode 1:\n" << job.agents[1].err());
  CHECK(job.agents[0].code == 7);
  const auto report = node0.find("Root cause (first observed failure):");
  REQUIRE(report != std::string::npos);
  CHECK_THAT(node0.substr(report),
             Catch::Contains("| bad \\xff\\xfe bytes") && !Catch::Contains("\xEF\xBF\xBD"));
}

TEST_CASE("the summary table stars every worker ddprun stopped, one that exited 0 on its TERM too",
          "[e2e][summary]") {
  Job job;
  // Rank 0 exits 0 on SIGTERM; rank 1 fails once rank 0 is ready.
  job.start(1, 2,
            sh("if [ \"$RANK\" = 0 ]; then exec " + kFake +
               " trap-term \"$DIR/term\" touch \"$DIR/ready\" hang; fi; exec " + kFake +
               " wait-file \"$DIR/ready\" exit 3"));
  job.wait_all();
  const std::string err = job.agents[0].err();
  INFO(err);
  CHECK(job.agents[0].code == 3);
  REQUIRE(std::ifstream(job.dir / "term").good());  // it did get the TERM
  static const std::regex kRow0(R"(\n +0 +0  \S+ +0 \* +\d+\.\d\ds\n)");
  CHECK(std::regex_search(err, kRow0));
  CHECK_THAT(err, Catch::Contains("  * stopped by ddprun during teardown"));
}

TEST_CASE(
    "a command that cannot start on one node: every node exits 127, the others' workers stopped, no pid",
    "[e2e][summary][command]") {
  // Node 0 runs its workers; node 1 cannot start the interpreter, which it finds only after the rendezvous.
  Job job;
  const std::string script = job.dir / "train.py";
  std::ofstream(script) << "import time\nopen(__import__('os').environ['DIR'] + '/started', 'w').close()\n"
                           "time.sleep(300)\n";
  job.extra_of[1] = {"--python", "/nonexistent/python"};
  job.start(2, 1, {script}, {"--rdzv-auth", "none", "--python", "/usr/bin/python3"});
  job.wait_all();
  const std::string lead = job.agents[0].err();
  INFO(lead);
  INFO(job.agents[1].err());
  CHECK(job.agents[0].code == 127);
  CHECK(job.agents[1].code == 127);
  CHECK_THAT(lead, Catch::Contains("python interpreter '/nonexistent/python' not found"));
  // The root cause names no pid for a command that never ran.
  CHECK_THAT(lead, Catch::Contains("  pid       : none (the command never started)\n") &&
                       !Catch::Contains("  pid       : 0\n"));
  CHECK(leftovers_after(job.token, 5s).empty());
}
