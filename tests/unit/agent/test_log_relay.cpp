// Log relay with real workers: whole prefixed lines, nothing lost, files, filters, report files.
#include <catch2/catch.hpp>
#include <map>

#include "agent_test_util.hpp"

using namespace agent_test;

namespace {
// Checks that `text` holds exactly `count` lines "[r]: line i" for each of `ranks`, in order per rank.
// Returns a description of the first problem, or "" when all is well.
std::string check_lines(const std::string& text, int ranks, long count) {
  std::map<int, long> next;
  long bad = 0;
  std::string first_bad;
  std::size_t start = 0;
  while (start < text.size()) {
    const auto nl = text.find('\n', start);
    if (nl == std::string::npos) return "text does not end with a newline";
    const std::string line = text.substr(start, nl - start);
    start = nl + 1;
    int rank = -1;
    long i = -1;
    char tail = 0;
    if (std::sscanf(line.c_str(), "[%d]: line %ld%c", &rank, &i, &tail) != 2 || rank < 0 || rank >= ranks ||
        i != next[rank] || line != "[" + std::to_string(rank) + "]: line " + std::to_string(i)) {
      if (bad++ == 0) first_bad = line;
      continue;
    }
    ++next[rank];
  }
  if (bad > 0) return std::to_string(bad) + " bad lines, first: '" + first_bad + "'";
  for (int r = 0; r < ranks; ++r) {
    if (next[r] != count) return "rank " + std::to_string(r) + " has " + std::to_string(next[r]) + " lines";
  }
  return "";
}
}  // namespace

TEST_CASE("4 workers x 100k lines on stdout and stderr: every line whole, prefixed, in order") {
  TempDir dir;
  const std::string a = "lines 100000 both";
  const auto r = run_agent_in_child(dir, make_workers({a, a, a, a}), 4, fake_options());
  REQUIRE(r.result.is_object());
  CHECK(r.result.at("exit_code") == 0);
  CHECK(check_lines(r.out, 4, 100000) == "");
  // stderr also carries the summary table at the end.
  const auto summary = r.err.find("ddprun: summary");
  REQUIRE(summary != std::string::npos);
  CHECK(check_lines(r.err.substr(0, summary), 4, 100000) == "");
}

TEST_CASE("the last line without a newline is kept - stderr stays stderr") {
  TempDir dir;
  const auto r = run_agent_in_child(dir, make_workers({"print first eprint on-err partial no-newline"}), 2,
                                    fake_options());
  REQUIRE(r.result.is_object());
  CHECK(r.out == "[0]: first\n[0]: no-newline\n");
  CHECK(r.err.rfind("[0]: on-err\n", 0) == 0);
}

TEST_CASE("no prefix for a single worker, a custom template, and --no-prefix") {
  TempDir dir;
  auto r = run_agent_in_child(dir, make_workers({"print x"}), 1, fake_options());
  CHECK(r.out == "x\n");
  auto opts = fake_options();
  opts.prefix_template = "{host}/{node_rank}/{rank}.{local_rank} ";
  r = run_agent_in_child(dir, make_workers({"print x", "print y"}), 2, opts);
  CHECK(r.out.find("testhost/0/0.0 x\n") != std::string::npos);
  CHECK(r.out.find("testhost/0/1.1 y\n") != std::string::npos);
  opts.no_prefix = true;
  r = run_agent_in_child(dir, make_workers({"print x"}), 2, opts);
  CHECK(r.out == "x\n");
}

TEST_CASE("log dir gets per-rank files and the local ranks filter limits only the console") {
  TempDir dir;
  AgentRun run(fake_options());
  run.opts.log_dir = dir / "logs";
  run.attempt.attempt = 2;
  run.opts.local_ranks_filter = std::set<int>{1};
  const auto r = run_agent_in_child(
      dir, make_workers({"print out0 eprint err0 partial tail0", "print out1 eprint err1"}, 0, 6), 8, run);
  REQUIRE(r.result.is_object());
  CHECK(r.result.at("exit_code") == 0);
  CHECK(r.out == "[7]: out1\n");
  CHECK(r.err.rfind("[7]: err1\n", 0) == 0);
  const std::string base = dir / "logs/attempt_2";
  CHECK(read_file(base + "/rank_6/stdout.log") == "out0\ntail0\n");
  CHECK(read_file(base + "/rank_6/stderr.log") == "err0\n");
  CHECK(read_file(base + "/rank_7/stdout.log") == "out1\n");
  CHECK(read_file(base + "/rank_7/stderr.log") == "err1\n");
}

TEST_CASE("a failed run writes the JSON report with the root cause's last stderr lines") {
  TempDir dir;
  auto opts = fake_options();
  opts.error_file = dir / "sub/error.json";
  const auto r = run_agent_in_child(dir, make_workers({"hang", "eprint boom1 eprint boom2 exit 7"}), 2, opts);
  REQUIRE(r.result.is_object());
  CHECK(r.result.at("exit_code") == 7);
  const auto j = nlohmann::json::parse(read_file(dir / "sub/error.json"));
  CHECK(j.at("exit_code") == 7);
  CHECK(j.at("success") == false);
  const auto& root = j.at("root_cause");
  CHECK(root.at("rank") == 1);
  CHECK(root.at("local_rank") == 1);
  CHECK(root.at("host") == "testhost");
  CHECK(root.at("exit_code") == 7);
  CHECK(root.at("stderr_tail") == std::vector<std::string>{"boom1", "boom2"});
  CHECK(j.at("workers").size() == 2);
  CHECK(j.at("workers").at(0).at("stopped_by_ddprun") == true);
  // The text report: root cause first, with its stderr, then the other failure, then the summary.
  const auto root_pos = r.err.find("Root cause");
  const auto boom_pos = r.err.find("    | boom2");
  const auto other_pos = r.err.find("Other failures");
  const auto summary_pos = r.err.find("ddprun: summary");
  REQUIRE(root_pos != std::string::npos);
  CHECK(root_pos < boom_pos);
  CHECK(boom_pos < other_pos);
  CHECK(other_pos < summary_pos);
  CHECK(summary_pos != std::string::npos);
}

TEST_CASE("without --error-file the JSON report goes into the log dir") {
  TempDir dir;
  auto opts = fake_options();
  opts.log_dir = dir / "logs";
  const auto r = run_agent_in_child(dir, make_workers({"exit 4"}, 3), 1, opts);
  REQUIRE(r.result.is_object());
  const auto j = nlohmann::json::parse(read_file(dir / "logs/attempt_0/error_node_3.json"));
  CHECK(j.at("root_cause").at("exit_code") == 4);
  CHECK(j.at("root_cause").at("node_rank") == 3);
}

TEST_CASE("bad log options are rejected with a clear message") {
  auto opts = fake_options();
  opts.tee = true;
  CHECK_THROWS_WITH(ddprun::agent::validate_options(opts), Catch::Contains("--log-dir"));
  opts.tee = false;
  opts.prefix_template = "[{rnk}]";
  CHECK_THROWS_WITH(ddprun::agent::validate_options(opts), Catch::Contains("{rnk}"));
}
