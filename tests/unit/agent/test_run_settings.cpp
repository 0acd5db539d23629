// The fields each unit of a run reads (run_settings.hpp): the options' and the attempt's, each where the
// user expects it.
#include <catch2/catch.hpp>

#include "agent/events.hpp"
#include "run_settings.hpp"

using namespace ddprun::agent;

TEST_CASE("the rank prefix is on for several ranks or a given template, never with --no-prefix") {
  struct Row {
    bool no_prefix;
    std::optional<std::string> prefix;
    int world_size;
    bool on;
    std::string shown;  // the template used
  };
  const std::vector<Row> rows{
      {false, std::nullopt, 1, false, "[{rank}]: "}, {false, std::nullopt, 2, true, "[{rank}]: "},
      {false, "{host} ", 1, true, "{host} "},        {true, std::nullopt, 8, false, "[{rank}]: "},
      {true, "{host} ", 8, false, "{host} "},
  };
  for (const auto& r : rows) {
    AgentOptions o;
    o.no_prefix = r.no_prefix;
    o.prefix_template = r.prefix;
    const auto s = relay_settings(o, {}, r.world_size, nullptr);
    CAPTURE(r.no_prefix, r.prefix.value_or("-"), r.world_size);
    CHECK(s.prefix_on == r.on);
    CHECK(s.prefix_template == r.shown);
  }
}

TEST_CASE(
    "a run's log files, error file and heartbeat files are the attempt's, its error file named by its plan") {
  AgentOptions o;
  o.log_dir = "/logs";
  o.requeue = 2;
  o.error_file = "/err.json";
  o.task_rank = 5;
  o.max_restarts_without_progress = 3;
  AttemptContext a;
  a.attempt = 4;
  a.agents = 16;
  const auto relay = relay_settings(o, a, 64, nullptr);
  CHECK(relay.log_dir == o.log_dir);
  CHECK(relay.requeue == 2);
  CHECK(relay.attempt == 4);
  const auto hang = hang_settings(o, a);
  CHECK(hang.attempt == 4);
  CHECK(hang.requeue == 2);
  CHECK(hang.step_files);  // heartbeat files for the steps, without --hang-timeout
  CHECK_FALSE(hang.timeout);
  const auto spec = error_file_spec(report_settings(o, a, nullptr), 7);
  CHECK(spec.error_file == o.error_file);
  CHECK(spec.attempt == 4);
  CHECK(spec.node_rank == 7);
  CHECK(spec.agents == 16);
  CHECK(spec.task_rank == 5);
  CHECK(error_file_path(spec) == "/err.rank5.json");  // per-task mode: tasks share a node rank
  o.task_rank.reset();
  CHECK(error_file_path(error_file_spec(report_settings(o, a, nullptr), 7)) == "/err.node7.json");
  a.agents = 1;  // this attempt's plan has one agent: the name as given
  CHECK(error_file_path(error_file_spec(report_settings(o, a, nullptr), 7)) == "/err.json");
}

TEST_CASE("only JSON events turn the relay's terminal drawing off") {
  Events json(LogFormat::json, 2);
  Events text(LogFormat::text, 2);
  CHECK(relay_settings({}, {}, 1, &json).json_events);
  CHECK_FALSE(relay_settings({}, {}, 1, &text).json_events);
  CHECK_FALSE(relay_settings({}, {}, 1, nullptr).json_events);
  CHECK(report_settings({}, {}, &json).events == &json);
}
