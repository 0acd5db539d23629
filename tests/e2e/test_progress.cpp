// --max-restarts-without-progress: workers write their step to DDPRUN_HEARTBEAT_FILE (no
// --hang-timeout needed); a job failing at the same step on every restart stops with exit 123 on
// every node, one that gets further each time keeps restarting.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "e2e/job.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

// Two agents, one worker each. Every worker leaves attempt.<restart>.<rank>, writes `step` (a shell
// expression) to its heartbeat file; rank 1 then fails with exit 3, rank 0 waits to be torn down.
void start_two(Job& job, const std::string& step, const std::vector<std::string>& more) {
  job.start(2, 1,
            sh("touch \"$DIR/attempt.$TORCHELASTIC_RESTART_COUNT.$RANK\"; "
               "[ -n \"$DDPRUN_HEARTBEAT_FILE\" ] || { echo 'no DDPRUN_HEARTBEAT_FILE' >&2; exit 99; }; "
               "echo \"step " +
               step +
               "\" > \"$DDPRUN_HEARTBEAT_FILE\"; "
               "if [ \"$RANK\" = 1 ]; then exit 3; fi; sleep 60"),
            more);
}

int attempts_started(const std::filesystem::path& dir) {
  int n = 0;
  while (std::filesystem::exists(dir / ("attempt." + std::to_string(n) + ".1"))) ++n;
  return n;
}

}  // namespace

TEST_CASE("no progress: a job failing at the same step stops after K restarts with exit 123 on every node",
          "[e2e][progress]") {
  Job job;
  start_two(job, "1200", {"--max-restarts", "10", "--max-restarts-without-progress", "2"});
  for (auto& a : job.agents) REQUIRE(wait_for(a, 240s));
  for (auto& a : job.agents) {
    INFO(a.err());
    CHECK(a.code == 123);
    CHECK_THAT(a.err(),
               Catch::Contains("no progress in 2 restarts in a row (--max-restarts-without-progress 2)") &&
                   Catch::Contains("the last attempt failed at step 1200, the best step is 1200"));
  }
  // The last attempt's report names the job's code, not its root cause's 3: node 0's report and table,
  // node 1's one line.
  CHECK_THAT(job.agents[0].err(),
             Catch::Contains("ddprun: job failed with exit code 123 (attempt 2, node 0") &&
                 Catch::Contains("FAILED, exit code 123"));
  CHECK_THAT(job.agents[1].err(), Catch::Contains("failed, exit 123, root cause rank 1"));
  // The first attempt and two restarts, not the ten --max-restarts allows.
  CHECK(attempts_started(job.dir.path()) == 3);
}

TEST_CASE("no progress: the error file holds the last attempt's report and the job's own exit code 123",
          "[e2e][progress]") {
  Job job;
  start_two(
      job, "1200",
      {"--max-restarts", "10", "--max-restarts-without-progress", "1", "--error-file", job.dir / "err.json"});
  for (auto& a : job.agents) REQUIRE(wait_for(a, 240s));
  for (int node = 0; node < 2; ++node) {
    INFO("node " << node << ": " << job.agents[static_cast<std::size_t>(node)].err());
    CHECK(job.agents[static_cast<std::size_t>(node)].code == 123);
    const std::string path = job.dir / ("err.node" + std::to_string(node) + ".json");
    REQUIRE(std::filesystem::exists(path));
    const auto report = nlohmann::json::parse(read_file(path));
    CHECK(report["exit_code"] == 3);  // the last attempt's: rank 1 exited 3
    CHECK(report["attempt"] == 1);
    CHECK(report["job_exit_code"] == 123);  // what ddprun exited with
  }
}

TEST_CASE("no progress: a job that gets further on every attempt keeps restarting to --max-restarts",
          "[e2e][progress]") {
  Job job;
  start_two(job, "$((100 * (TORCHELASTIC_RESTART_COUNT + 1)))",
            {"--max-restarts", "3", "--max-restarts-without-progress", "1"});
  for (auto& a : job.agents) REQUIRE(wait_for(a, 240s));
  for (auto& a : job.agents) {
    INFO(a.err());
    CHECK(a.code == 3);  // the failure's own code once restarts are used up
    CHECK_THAT(a.err(), !Catch::Contains("no progress"));
  }
  CHECK(attempts_started(job.dir.path()) == 4);
}
