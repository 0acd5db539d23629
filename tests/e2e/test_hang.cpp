// --hang-timeout with real agents on loopback: a stuck rank is found, its stack is in the report,
// every node exits 124 and nothing is left running; output or a heartbeat touch is progress.
#include <catch2/catch.hpp>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "e2e/job.hpp"
#include "support/paths.hpp"
#include "support/torch_python.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

const std::string kScript = ddprun_test::source_dir() + "/tests/e2e/hang_worker.py";

std::vector<std::string> python_flags(const std::string& timeout) {
  return {"--hang-timeout", timeout, "--python", torch_python()};
}

}  // namespace

TEST_CASE("hang: a stuck Python rank's stack is in its node's report, every node exits 124",
          "[e2e][hang][torch2]") {
  auto flags = python_flags("3");  // the default MASTER_PORT: ddprun claims it, no other job here takes it
  Job job;
  job.start(2, 1, {kScript, "collective"}, flags);  // rank 0 waits in a real all_reduce (gloo)
  job.wait_all();
  const std::string node0 = job.agents[0].err();
  const std::string node1 = job.agents[1].err();
  INFO("node 0:\n" << node0 << "\nnode 1:\n" << node1);
  CHECK(job.agents[0].code == 124);
  CHECK(job.agents[1].code == 124);
  // Node 1 runs the stuck rank: faulthandler's dump of it, in node 1's own report.
  CHECK_THAT(node1, Catch::Contains("Stacks of the silent ranks on this node:"));
  CHECK_THAT(node1, Catch::Contains("| ") && Catch::Contains("in stuck_in_distinctive_function"));
  // Node 0's rank waited for it in the collective: its stack too, and the job summary says hang.
  CHECK_THAT(node0, Catch::Contains("in wait_for_peer_in_all_reduce"));
  CHECK_THAT(node0, Catch::Contains("HUNG, exit code 124"));
  CHECK(leftovers_after(job.token, 5s).empty());
}

TEST_CASE("hang: a restarted hang hangs again, and the final exit code is still 124", "[e2e][hang]") {
  auto flags = python_flags("2");
  Job job;
  flags.insert(flags.end(), {"--max-restarts", "1"});
  job.start(2, 1, {kScript, "stuck"}, flags);
  job.wait_all();
  INFO(job.agents[0].err() << "\n" << job.agents[1].err());
  CHECK(job.agents[0].code == 124);
  CHECK(job.agents[1].code == 124);
  CHECK_THAT(job.agents[0].err(), Catch::Contains("attempt 1"));
  CHECK(leftovers_after(job.token, 5s).empty());
}

TEST_CASE("hang: a rank that keeps printing is never hung", "[e2e][hang]") {
  const auto flags = python_flags("1");
  Job job;
  job.start(1, 2, {kScript, "chatty", "4"}, flags);
  job.wait_all();
  INFO(job.agents[0].err());
  CHECK(job.agents[0].code == 0);
  CHECK_THAT(job.agents[0].err(), !Catch::Contains("ddprun: hang:") && !Catch::Contains("hung"));
  // Without --log-dir each worker's heartbeat file lay in a private directory, gone after the run.
  for (int rank = 0; rank < 2; ++rank) {
    const std::string beat = read_file(job.dir / ("heartbeat_path_" + std::to_string(rank)));
    INFO(beat);
    CHECK_FALSE(beat.empty());
    CHECK_FALSE(std::filesystem::exists(beat));
  }
}

TEST_CASE("hang: a rank that prints nothing but touches its heartbeat file is never hung", "[e2e][hang]") {
  auto flags = python_flags("1");
  Job job;
  flags.insert(flags.end(), {"--log-dir", job.dir / "logs"});
  job.start(1, 2, {kScript, "heartbeat", "4"}, flags);
  job.wait_all();
  INFO(job.agents[0].err());
  CHECK(job.agents[0].code == 0);
  CHECK_THAT(job.agents[0].err(), !Catch::Contains("ddprun: hang:") && !Catch::Contains("hung"));
  // With --log-dir the file lies beside the rank's logs.
  CHECK(read_file(job.dir / "heartbeat_path_1") == job.dir / "logs/attempt_0/rank_1/heartbeat");
}

TEST_CASE("hang: a native worker's stack comes from eu-stack", "[e2e][hang]") {
  Job job;
  job.start(1, 1, {kFake, "hang"}, {"--hang-timeout", "1"});
  job.wait_all();
  const std::string err = job.agents[0].err();
  INFO(err);
  CHECK(job.agents[0].code == 124);
  CHECK_THAT(err, Catch::Contains("native stack (eu-stack)"));
  // A frame of the stuck thread, or the one line that says why there is none.
  CHECK_THAT(err, Catch::Contains("#0 ") || Catch::Contains("eu-stack not installed"));
  CHECK(leftovers_after(job.token, 5s).empty());
}

TEST_CASE("hang: json events name the hung ranks and the report carries the stacks", "[e2e][hang]") {
  Job job;
  job.start(1, 1, {kFake, "hang"}, {"--hang-timeout", "1", "--log-format", "json"});
  job.wait_all();
  const std::string err = job.agents[0].err();
  INFO(err);
  CHECK(job.agents[0].code == 124);
  CHECK_THAT(err, Catch::Contains("\"event\":\"hang_detected\"") && Catch::Contains("\"silent_s\""));
  CHECK_THAT(err, Catch::Contains("\"event\":\"failure_report\"") && Catch::Contains("\"hang\":true") &&
                      Catch::Contains("\"stack_kind\":\"native\""));
  CHECK(leftovers_after(job.token, 5s).empty());
}

TEST_CASE("hang: the hung rank's stack on node 1 is in node 0's report and error file", "[e2e][hang]") {
  for (const bool quiet : {false, true}) {
    Job job;
    // Rank 1 (node 1) is stuck; rank 0 keeps printing, so only node 1 finds a hang.
    auto flags = python_flags("2");
    flags.insert(flags.end(), {"--error-file", job.dir / "err.json"});
    if (quiet) flags.push_back("--quiet");
    job.start(2, 1, {kScript, "stuck_chatty"}, flags);
    job.wait_all();
    const std::string node0 = job.agents[0].err();
    const std::string node1 = job.agents[1].err();
    INFO("quiet " << quiet << "\nnode 0:\n" << node0 << "\nnode 1:\n" << node1);
    CHECK(job.agents[0].code == 124);
    CHECK(job.agents[1].code == 124);
    // Node 1's one line sends the user to node 0's report: the stuck rank's stack is there.
    CHECK_THAT(node1, Catch::Contains("full report on node 0"));
    const auto report = node0.find("Root cause (hang):");
    REQUIRE(report != std::string::npos);
    CHECK_THAT(node0.substr(report),
               Catch::Contains("| ") && Catch::Contains("in stuck_in_distinctive_function"));
    const auto j = nlohmann::json::parse(read_file(job.dir / "err.node0.json"));
    CHECK(j.at("root_cause").at("rank") == 1);
    CHECK_THAT(j.at("root_cause").value("stack", std::string()),
               Catch::Contains("in stuck_in_distinctive_function"));
    CHECK(leftovers_after(job.token, 5s).empty());
  }
}
