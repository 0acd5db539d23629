// Where a run's files go: per-rank logs that separate Slurm requeues, per-agent error files, and
// which stale error file a run removes when it starts.
#include <catch2/catch.hpp>

#include "agent/log_paths.hpp"
#include "agent_test_util.hpp"

using namespace ddprun::agent;
using namespace agent_test;

TEST_CASE("log paths: a requeued job writes beside, never over, the first run's logs", "[logs]") {
  struct Row {
    int requeue, attempt, rank;
    std::string want;
  };
  const std::vector<Row> table = {
      {0, 0, 0, "/L/attempt_0/rank_0"},            // the layout of a job never requeued is unchanged
      {0, 2, 7, "/L/attempt_2/rank_7"},            // a restart of this launch (--max-restarts)
      {1, 0, 0, "/L/requeue_1/attempt_0/rank_0"},  // SLURM_RESTART_COUNT=1
      {3, 1, 12, "/L/requeue_3/attempt_1/rank_12"},
  };
  for (const auto& r : table) {
    INFO(r.want);
    CHECK(rank_log_dir("/L", r.requeue, r.attempt, r.rank) == r.want);
    CHECK(rank_log_dir("/L", r.requeue, r.attempt, r.rank)
              .starts_with(attempt_dir("/L", r.requeue, r.attempt)));
  }
}

TEST_CASE("error file: one per agent, in the run's own attempt dir or from --error-file", "[logs]") {
  struct Row {
    std::optional<std::string> error_file, log_dir;
    int requeue, attempt, node_rank, agents;
    std::optional<int> task_rank;
    std::string want;
  };
  const std::vector<Row> table = {
      {{}, {}, 0, 0, 0, 1, {}, ""},  // nowhere to write
      {{}, "/L", 0, 0, 3, 4, {}, "/L/attempt_0/error_node_3.json"},
      {{}, "/L", 2, 1, 1, 2, {}, "/L/requeue_2/attempt_1/error_node_1.json"},
      {{}, "/L", 0, 0, 0, 8, 5, "/L/attempt_0/error_rank_5.json"},  // per-task: tasks share a node
      {"/e/err.json", "/L", 1, 0, 0, 1, {}, "/e/err.json"},         // one agent: the path as given
      {"/e/err.json", {}, 0, 0, 1, 3, {}, "/e/err.node1.json"},     // several: a suffix per node
      {"/e/err.json", {}, 0, 0, 0, 3, {}, "/e/err.node0.json"},
      {"/e/err", {}, 0, 0, 2, 3, {}, "/e/err.node2"},
      {"/e.d/err", {}, 0, 0, 2, 3, {}, "/e.d/err.node2"},  // a dot in a directory is no extension
      {"/e/.err", {}, 0, 0, 2, 3, {}, "/e/.err.node2"},    // nor a leading dot
      {"/e/err-{node_rank}.json", {}, 0, 0, 2, 3, {}, "/e/err-2.json"},  // the placeholder
      {"/e/{node_rank}/{node_rank}.json", {}, 0, 0, 1, 1, {}, "/e/1/1.json"},
      {"/e/err-{node_rank}.json", {}, 0, 0, 1, 6, 4, "/e/err-1.rank4.json"},  // per-task
  };
  for (const auto& r : table) {
    INFO(r.want);
    const ErrorFileSpec s{r.error_file, r.log_dir, r.requeue, r.attempt, r.node_rank, r.agents, r.task_rank};
    CHECK(error_file_path(s) == r.want);
  }
}

TEST_CASE("stale error file: the run's own path, except --error-file after the first attempt", "[logs]") {
  ErrorFileSpec s{{}, "/L", 0, 1, 0, 2, {}};
  CHECK(stale_error_file(s) == "/L/attempt_1/error_node_0.json");  // an earlier launch's
  s.error_file = "/e/err.json";
  CHECK(stale_error_file(s).empty());  // attempt 0 of this launch wrote it: keep until replaced
  s.attempt = 0;
  CHECK(stale_error_file(s) == "/e/err.node0.json");
  s.error_file.reset();
  s.log_dir.reset();
  CHECK(stale_error_file(s).empty());
}

TEST_CASE("a requeued run logs under requeue_<n> and removes no file of the first run", "[logs]") {
  TempDir dir;
  auto opts = fake_options();
  opts.log_dir = dir / "logs";
  // The first run failed: its logs and its error report.
  auto r = run_agent_in_child(dir, make_workers({"print first eprint bad exit 3"}), 1, opts);
  REQUIRE(r.result.is_object());
  REQUIRE(fs::exists(dir / "logs/attempt_0/error_node_0.json"));
  // Slurm requeues the job (SLURM_RESTART_COUNT=1); this time it succeeds.
  opts.requeue = 1;
  r = run_agent_in_child(dir, make_workers({"print second"}), 1, opts);
  REQUIRE(r.result.is_object());
  CHECK(r.result.at("exit_code") == 0);
  CHECK(read_file(dir / "logs/attempt_0/rank_0/stdout.log") == "first\n");
  CHECK(read_file(dir / "logs/attempt_0/rank_0/stderr.log") == "bad\n");
  CHECK(fs::exists(dir / "logs/attempt_0/error_node_0.json"));
  CHECK(read_file(dir / "logs/requeue_1/attempt_0/rank_0/stdout.log") == "second\n");
  CHECK_FALSE(fs::exists(dir / "logs/requeue_1/attempt_0/error_node_0.json"));
}

TEST_CASE("a run removes the error report an earlier launch left where it writes", "[logs]") {
  TempDir dir;
  auto opts = fake_options();
  opts.log_dir = dir / "logs";
  auto r = run_agent_in_child(dir, make_workers({"exit 3"}), 1, opts);
  REQUIRE(fs::exists(dir / "logs/attempt_0/error_node_0.json"));
  r = run_agent_in_child(dir, make_workers({"print ok"}), 1, opts);  // the same command again
  CHECK(r.result.at("exit_code") == 0);
  CHECK_FALSE(fs::exists(dir / "logs/attempt_0/error_node_0.json"));
  // --error-file: removed at the start of a launch too.
  opts.error_file = dir / "err.json";
  r = run_agent_in_child(dir, make_workers({"exit 4"}), 1, opts);
  REQUIRE(fs::exists(dir / "err.json"));
  r = run_agent_in_child(dir, make_workers({"print ok"}), 1, opts);
  CHECK_FALSE(fs::exists(dir / "err.json"));
}
