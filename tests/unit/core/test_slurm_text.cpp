// Reading Slurm's command output: lines, and scontrol's Key=Value fields (requeue, the job locator).
#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/slurm_text.hpp"

using namespace ddprun::core;

TEST_CASE("split_lines: one line per newline, none after a final one, empty lines between kept") {
  struct Row {
    std::string_view text;
    std::vector<std::string_view> lines;
  };
  const std::vector<Row> table = {
      {"", {}},
      {"\n", {""}},
      {"a", {"a"}},
      {"a\n", {"a"}},
      {"a\nb", {"a", "b"}},
      {"a\nb\n", {"a", "b"}},
      {"a\n\nb\n", {"a", "", "b"}},
      {"\na", {"", "a"}},
      {"12.0|ddprun|n[1-2]\n12.1|python3|n1\n", {"12.0|ddprun|n[1-2]", "12.1|python3|n1"}},
  };
  for (const auto& row : table) {
    INFO(std::string(row.text));
    CHECK(split_lines(row.text) == row.lines);
  }
}

TEST_CASE("scontrol_field: the first Key=Value field, split on spaces and newlines") {
  struct Row {
    std::string_view text;
    std::string_view key;
    std::optional<std::string_view> value;
  };
  const std::vector<Row> table = {
      {"JobId=7 JobState=RUNNING Reason=None", "JobState", "RUNNING"},
      {"JobId=7 JobState=RUNNING Reason=None", "JobId", "7"},
      {"JobId=7 JobState=RUNNING Reason=None", "Reason", "None"},
      {"JobId=7 JobState=RUNNING", "Reason", std::nullopt},
      {"", "JobState", std::nullopt},
      {"JobState= Reason=None", "JobState", ""},    // present but empty
      {"JobState", "JobState", std::nullopt},       // no '='
      {"JobStateX=1 JobState=2", "JobState", "2"},  // a longer name is another field
      {"XJobState=1", "JobState", std::nullopt},
      {"A=1 A=2", "A", "1"},  // the first wins
      {"NodeName=n1 Arch=x86_64\n   NodeAddr=10.0.0.1 State=IDLE", "NodeAddr", "10.0.0.1"},
      {"NodeName=n1\nNodeAddr=n1", "NodeName", "n1"},  // a newline ends a value too
      {"  JobState=RUNNING  ", "JobState", "RUNNING"},
      {"ResvPorts=12001-12002 Checkpoint=0", "ResvPorts", "12001-12002"},
      {"Comment=a=b", "Comment", "a=b"},  // only the first '=' separates
  };
  for (const auto& row : table) {
    INFO(std::string(row.text) << " / " << std::string(row.key));
    CHECK(scontrol_field(row.text, row.key) == row.value);
  }
}
