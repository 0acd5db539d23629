// Hang detection's pure pieces: which ranks are hung, how often to poll, Python or native stacks,
// the worker variables, the stack cap, and how a hang shows in the report and the restart rule.
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "agent/hang_watch.hpp"
#include "agent/result.hpp"
#include "job_summary.hpp"
#include "report.hpp"

using namespace ddprun::agent;
using std::chrono::milliseconds;

TEST_CASE("hang: a live rank silent for the timeout is hung, an exited one never", "[hang]") {
  const SteadyTime t0{};
  struct Row {
    int silent_ms;
    bool exited;
    bool hung;
  };
  const Row table[] = {
      {0, false, false},     // just printed
      {2999, false, false},  // just under the timeout
      {3000, false, true},   // exactly the timeout
      {60000, false, true},  // long silent
      {60000, true, false},  // exited: not hung, however long ago it printed
  };
  for (const auto& row : table) {
    const std::vector<RankProgress> p{{0, 7, t0, row.exited}};
    INFO("silent " << row.silent_ms << " exited " << row.exited);
    CHECK(hung_ranks(t0 + milliseconds(row.silent_ms), p, milliseconds(3000)).size() == (row.hung ? 1u : 0u));
  }
}

TEST_CASE("hang: the hung ranks come longest silent first, with their silence", "[hang]") {
  const SteadyTime now = SteadyTime{} + milliseconds(100000);
  const std::vector<RankProgress> p{{0, 4, now - milliseconds(5000), false},
                                    {1, 5, now - milliseconds(9000), false},
                                    {2, 6, now - milliseconds(100), false},
                                    {3, 7, now - milliseconds(5000), false}};
  const auto h = hung_ranks(now, p, milliseconds(4000));
  REQUIRE(h.size() == 3);
  CHECK(h[0].rank == 5);
  CHECK(h[0].worker == 1);
  CHECK(h[0].silent == milliseconds(9000));
  CHECK(h[1].rank == 4);  // equal silence: by rank
  CHECK(h[2].rank == 7);
}

TEST_CASE("hang: heartbeats are polled at a quarter of the timeout, between 10 ms and 1 s", "[hang]") {
  CHECK(hang_poll_interval(milliseconds(3000)) == milliseconds(750));
  CHECK(hang_poll_interval(milliseconds(600000)) == milliseconds(1000));
  CHECK(hang_poll_interval(milliseconds(1)) == milliseconds(10));
}

TEST_CASE("hang: Python workers get faulthandler stacks, the others eu-stack", "[hang]") {
  struct Row {
    std::vector<std::string> command;
    bool no_python;
    bool module;
    bool python;
  };
  const Row table[] = {
      {{"train.py", "--lr", "1"}, false, false, true},
      {{"pkg.train"}, false, true, true},
      {{"/usr/bin/python3", "train.py"}, true, false, true},
      {{"python", "-c", "x"}, true, false, true},
      {{"./fake_worker"}, false, false, false},
      {{"sleep", "100"}, false, false, false},
      {{"train.py"}, true, false, false},  // --no-python: the script runs as it is (its shebang)
  };
  for (const auto& row : table) {
    INFO(row.command.front());
    CHECK(python_worker(CommandSpec{row.command, row.no_python, row.module, "python3"}) == row.python);
  }
}

TEST_CASE("hang: -I and -E make Python ignore PYTHONFAULTHANDLER, -X faulthandler does not need it",
          "[hang]") {
  struct Row {
    std::vector<std::string> argv;
    char ignores_env;
    bool faulthandler;
  };
  const std::vector<Row> rows = {
      {{"python3", "train.py"}, 0, false},
      {{"python3", "-u", "train.py", "-I"}, 0, false},  // the script's own option
      {{"python3", "-I", "train.py"}, 'I', false},
      {{"/usr/bin/python3.11", "-E", "-u", "train.py"}, 'E', false},
      {{"python3", "-uI", "train.py"}, 'I', false},
      {{"python3", "-EI", "train.py"}, 'E', false},
      {{"python3", "-I", "-X", "faulthandler", "train.py"}, 'I', true},
      {{"python3", "-IXfaulthandler", "train.py"}, 'I', true},
      {{"python3", "-X", "faulthandler=1", "-E", "-m", "pkg"}, 'E', true},
      {{"python3", "-X", "dev", "-I", "x.py"}, 'I', false},
      {{"python3", "-W", "ignore", "-I", "x.py"}, 'I', false},
      {{"python3", "-WI", "x.py"}, 0, false},  // -W's value "I"
      {{"python3", "-m", "pkg", "-I"}, 0, false},
      {{"python3", "-c", "import x", "-I"}, 0, false},
      {{"python3", "-cI"}, 0, false},  // -c's command "I"
      {{"python3", "--check-hash-based-pycs", "always", "-I", "x.py"}, 'I', false},
      {{"python3", "--", "-I"}, 0, false},
      {{"python3", "-", "-I"}, 0, false},
      {{"python3"}, 0, false},
      {{}, 0, false},
  };
  for (const auto& r : rows) {
    std::string joined;
    for (const auto& a : r.argv) joined += a + " ";
    INFO(joined);
    const PythonFlags f = python_flags(r.argv);
    CHECK(f.ignores_env == r.ignores_env);
    CHECK(f.faulthandler == r.faulthandler);
  }
}

TEST_CASE("hang: workers get their heartbeat file and faulthandler unless the user chose", "[hang]") {
  const auto env = hang_env({{"RANK", "3"}}, {"PATH=/bin"}, "/tmp/x/heartbeat", true);
  CHECK(env.at("RANK") == "3");
  CHECK(env.at("DDPRUN_HEARTBEAT_FILE") == "/tmp/x/heartbeat");
  CHECK(env.at("PYTHONFAULTHANDLER") == "1");
  CHECK(hang_env({}, {"PYTHONFAULTHANDLER="}, "h", true).count("PYTHONFAULTHANDLER") == 0);  // user's
  CHECK(hang_env({{"PYTHONFAULTHANDLER", "0"}}, {}, "h", true).at("PYTHONFAULTHANDLER") == "0");
  CHECK(hang_env({}, {}, "h", false).count("PYTHONFAULTHANDLER") == 0);  // native: eu-stack instead
}

TEST_CASE("hang: a stack is capped at a line end, saying how much was left out", "[hang]") {
  CHECK(cap_stack("a\nb\n", 100) == "a\nb\n");
  const std::string big = std::string(10, 'x') + "\n" + std::string(10, 'y') + "\n";
  CHECK(cap_stack(big, 15) == std::string(10, 'x') + "\n... (11 more bytes left out)\n");
  CHECK(cap_stack(std::string(40000, 'z')).size() < 16 * 1024 + 64);
}

TEST_CASE("hang: the report names it, lists the silent ranks with their stacks, exit 124", "[hang]") {
  RunResult r;
  r.exit_code = 124;
  r.host = "n1";
  Failure f;
  f.host = "n1";
  f.rank = 1;
  f.exit_code = ddprun::core::kHangExitCode;
  f.hang = true;
  f.reason = "hung: no output or heartbeat for --hang-timeout 3 s; silent rank 1 (3.2 s)";
  f.stderr_tail = {"Fatal Python error: Aborted"};
  r.root_cause = f;
  r.hung = {
      {1, 0, 4242, milliseconds(3200), true, "  File \"w.py\", line 3 in stuck_in_distinctive_function\n"}};
  const std::string text = format_report(r);
  CHECK_THAT(text, Catch::Contains("job hung with exit code 124"));
  CHECK_THAT(text, Catch::Contains("Root cause (hang):"));
  CHECK_THAT(text, Catch::Contains("rank 1 (local rank 0), pid 4242, silent for 3.20s"));
  CHECK_THAT(text, Catch::Contains("    |   File \"w.py\", line 3 in stuck_in_distinctive_function"));
  CHECK_THAT(format_report(r, false, ReportLength::brief), Catch::Contains("stuck_in_distinctive_function"));
  const auto j = report_to_json(r);
  CHECK(j.at("hang") == true);
  CHECK(j.at("hung").at(0).at("stack_kind") == "python");
  CHECK(j.at("root_cause").at("silent").is_array());
}

TEST_CASE("hang: restartable under --max-restarts, and the final code is 124 on every node", "[hang]") {
  Failure f;
  f.rank = 1;
  f.exit_code = ddprun::core::kHangExitCode;
  f.hang = true;
  RunResult r;
  r.exit_code = 124;
  r.root_cause = f;
  CHECK(after_attempt(r, 0, 1).restart);
  CHECK(after_attempt(r, 0, 1).exit_code == 124);
  CHECK_FALSE(after_attempt(r, 1, 1).restart);
  CHECK(after_attempt(r, 1, 1).exit_code == 124);
  // A node whose own ranks were fine: the published hang is its root cause, with its code.
  RunResult other;
  other.exit_code = 124;
  other.remote_abort = true;
  other.root_cause = f;
  CHECK(after_attempt(other, 0, 0).exit_code == 124);
}

TEST_CASE("hang: a node other than 0 prints its own stacks beside its one line", "[hang]") {
  RunResult r;
  r.exit_code = 124;
  const auto quiet_member = plan_report(ReportRole::member, false, false, false, r, true);
  CHECK_FALSE(quiet_member.report);  // no stacks: the one line only, as for any failure
  r.hung = {{3, 1, 99, milliseconds(5000), false, "#0 0x1 nanosleep\n"}};
  const auto member = plan_report(ReportRole::member, false, false, false, r, true);
  CHECK(member.report);
  CHECK(member.length == ReportLength::brief);
  CHECK(member.member_line);
}
