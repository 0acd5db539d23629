// Pure pieces of the agent: line splitting, prefixes, failure policy, commands, report format.
#include <sys/stat.h>
#include <sys/wait.h>
#include <catch2/catch.hpp>
#include <csignal>

#include "agent/command.hpp"
#include "agent/error.hpp"
#include "agent/policy.hpp"
#include "agent/spawn.hpp"
#include "agent_test_util.hpp"
#include "log_relay.hpp"
#include "report.hpp"

using namespace ddprun::agent;

namespace {
std::vector<std::string> split_all(LineSplitter& s, const std::vector<std::string>& chunks, bool finish) {
  std::vector<std::string> lines;
  auto add = [&](std::string_view l) { lines.emplace_back(l); };
  for (const auto& c : chunks) s.feed(c, add);
  if (finish) s.finish(add);
  return lines;
}

Failure failure_at(int rank, int ms, int code = 1) {
  Failure f;
  f.host = "h" + std::to_string(rank);
  f.rank = rank;
  f.exit_code = code;
  f.pid = 100 + rank;
  f.time = ddprun::core::FailureTime(std::chrono::milliseconds(ms));
  return f;
}
}  // namespace

TEST_CASE("line splitter keeps lines whole across reads and keeps the last partial line") {
  LineSplitter s;
  CHECK(split_all(s, {"a\nb", "c\n\nd"}, false) == std::vector<std::string>{"a", "bc", ""});
  CHECK(s.pending_size() == 1);
  CHECK(split_all(s, {}, true) == std::vector<std::string>{"d"});
  CHECK(split_all(s, {}, true).empty());
}

TEST_CASE("line splitter cuts lines longer than its limit instead of growing") {
  LineSplitter s(4);
  CHECK(split_all(s, {"abcdefghij\nxy"}, true) == std::vector<std::string>{"abcd", "efgh", "ij", "xy"});
}

TEST_CASE("prefix template renders every placeholder and rejects unknown ones") {
  const PrefixFields f{12, 3, 1, "node7", "trainer"};
  CHECK(render_prefix(kDefaultPrefixTemplate, f) == "[12]: ");
  CHECK(render_prefix("{host}:{node_rank}/{local_rank} {role}{{x}} ", f) == "node7:1/3 trainer{x} ");
  try {
    render_prefix("[{rnak}] ", f);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("{rnak}") != std::string::npos);
  }
  CHECK_THROWS_AS(render_prefix("[{rank", f), Error);
  CHECK_THROWS_AS(render_prefix("rank}", f), Error);
}

TEST_CASE("tail buffer keeps only the last lines") {
  TailBuffer t(2);
  for (auto l : {"1", "2", "3"}) t.push(l);
  CHECK(t.lines() == std::deque<std::string>{"2", "3"});
}

TEST_CASE("wait statuses map to exit codes - signals to 128+signal") {
  CHECK(decode_wait_status(3 << 8).exit_code == 3);
  CHECK(decode_wait_status(3 << 8).signal == 0);
  const auto k = decode_wait_status(SIGKILL);
  CHECK(k.exit_code == 137);
  CHECK(k.signal == SIGKILL);
  CHECK(signal_name(SIGKILL) == "SIGKILL");
  CHECK(signal_name(SIGSEGV) == "SIGSEGV");
  CHECK(signal_name(SIGRTMIN + 1) == "signal " + std::to_string(SIGRTMIN + 1));
  CHECK(describe_exit(k) == "killed by SIGKILL");
  CHECK(describe_exit(ExitStatus{3, 0}) == "exited with code 3");
  CHECK(short_exit(k) == "SIGKILL (137)");
}

TEST_CASE("decode_child_status: waitid's siginfo reads like a wait status") {
  struct Row {
    int code;
    int status;
    int want_exit;
    int want_signal;
  };
  const Row rows[] = {
      {CLD_EXITED, 0, 0, 0},
      {CLD_EXITED, 3, 3, 0},
      {CLD_KILLED, SIGKILL, 137, SIGKILL},
      {CLD_DUMPED, SIGSEGV, 139, SIGSEGV},
      {CLD_STOPPED, SIGSTOP, 1, 0},  // not an end: a generic failure, as decode_wait_status
  };
  for (const auto& r : rows) {
    INFO("si_code " << r.code << " si_status " << r.status);
    const auto s = decode_child_status(r.code, r.status);
    CHECK(s.exit_code == r.want_exit);
    CHECK(s.signal == r.want_signal);
  }
}

TEST_CASE("root cause: the store's (the first published), else this node's own, else one it saw alone") {
  const auto local = failure_at(1, 200);
  const auto store = failure_at(5, 300);  // published first, although it happened later
  const auto lost_node0 = failure_at(-1, 100);
  struct Row {
    std::optional<Failure> store, local, observed;
    int want_rank;  // -2: none
  };
  const Row rows[] = {
      {store, local, lost_node0, 5},                 // the store decides, whatever the times say
      {store, std::nullopt, std::nullopt, 5},        // another node's failure tore this one down
      {std::nullopt, local, lost_node0, 1},          // not told (node 0 gone): this node's own
      {std::nullopt, local, std::nullopt, 1},        // a job of one node
      {std::nullopt, std::nullopt, lost_node0, -1},  // nothing failed here, node 0 is gone
      {std::nullopt, std::nullopt, std::nullopt, -2},
  };
  for (const auto& r : rows) {
    const auto got = choose_root_cause(r.store, r.local, r.observed);
    INFO("want rank " << r.want_rank);
    if (r.want_rank == -2) {
      CHECK_FALSE(got);
    } else {
      REQUIRE(got);
      CHECK(got->rank == r.want_rank);
    }
  }
  // This node's own failure won: its own record, which has the stderr lines read after publishing.
  auto fresher = local;
  fresher.stderr_tail = {"last words"};
  auto published = local;
  published.time = ddprun::core::FailureTime(std::chrono::microseconds(999));
  CHECK(choose_root_cause(published, fresher, std::nullopt)->stderr_tail == fresher.stderr_tail);
}

TEST_CASE("a worker's bytes in the report never drive the terminal") {
  struct Row {
    std::string in, want;
  };
  const Row rows[] = {
      {"plain text\twith a tab", "plain text\twith a tab"},
      {"\x1b[2Jclear", "\\x1b[2Jclear"},
      {"bell\x07 cr\r nul" + std::string(1, '\0'), "bell\\x07 cr\\x0d nul\\x00"},
      {"del\x7f", "del\\x7f"},
      {"caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80",
       "caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80"},  // UTF-8 kept
      {"c1 \xc2\x9b"
       "31m",
       "c1 \\xc2\\x9b31m"},  // U+009B: CSI on some terminals
      {"nbsp \xc2\xa0", "nbsp \xc2\xa0"},
      {"bad \xff \xc3 \xc0\xaf \xed\xa0\x80", "bad \\xff \\xc3 \\xc0\\xaf \\xed\\xa0\\x80"},
  };
  for (const auto& r : rows) {
    INFO(r.in);
    CHECK(escape_control(r.in) == r.want);
  }
}

TEST_CASE("the summary table stars every worker ddprun stopped, exit 0 included") {
  RunResult r;
  r.exit_code = 3;
  WorkerExit ok_on_term;
  ok_on_term.rank = 0;
  ok_on_term.host = "h";
  ok_on_term.stopped_by_ddprun = true;
  WorkerExit failed;
  failed.rank = 1;
  failed.local_rank = 1;
  failed.host = "h";
  failed.status = {3, 0};
  r.exits = {ok_on_term, failed};
  const std::string t = format_summary(r);
  CHECK_THAT(t, Catch::Contains("      0     0  h     0 *  ") &&
                    Catch::Contains("  * stopped by ddprun during teardown"));
  CHECK_THAT(t, Catch::Contains("      1     1  h     3    "));
}

TEST_CASE("job exit code: 0 only without failures or signals, else the root cause's code") {
  CHECK(job_exit_code(std::nullopt, 0, {{0, 0}, {0, 0}}) == 0);
  CHECK(job_exit_code(failure_at(1, 0, 3), 0, {{3, 0}, {143, SIGTERM}}) == 3);
  CHECK(job_exit_code(failure_at(1, 0, 3), SIGTERM, {{3, 0}}) == 3);
  CHECK(job_exit_code(std::nullopt, SIGTERM, {{0, 0}}) == 143);
  CHECK(job_exit_code(std::nullopt, 0, {{0, 0}, {9, 0}}) == 9);
  CHECK(is_stopping_signal(SIGTERM));
  CHECK(is_stopping_signal(SIGQUIT));
  CHECK_FALSE(is_stopping_signal(SIGUSR1));
  CHECK(forwarded_signals().size() == 6);
}

TEST_CASE("commands: .py and -m run under python -u, --no-python as is") {
  CHECK(build_argv({{"train.py", "--lr", "1"}, false, false, "python3"}) ==
        std::vector<std::string>{"python3", "-u", "train.py", "--lr", "1"});
  CHECK(build_argv({{"pkg.mod", "x"}, false, true, "/opt/py"}) ==
        std::vector<std::string>{"/opt/py", "-u", "-m", "pkg.mod", "x"});
  CHECK(build_argv({{"train.py"}, true, false, "python3"}) == std::vector<std::string>{"train.py"});
  CHECK(build_argv({{"./a.out", "1"}, false, false, "python3"}) == std::vector<std::string>{"./a.out", "1"});
  CHECK_THROWS_AS(build_argv({{}, false, false, "python3"}), ddprun::core::Error);
}

TEST_CASE("PATH lookup finds executables only, like execvp") {
  agent_test::TempDir dir;
  const std::string plain = dir / "notexec";
  std::ofstream(plain) << "x";
  CHECK(find_in_path("sh", "/nonexistent:/bin:/usr/bin").value_or("").find("/sh") != std::string::npos);
  CHECK_FALSE(find_in_path("notexec", dir.path().string()));
  CHECK_FALSE(find_in_path("ddprun-no-such-command", "/bin:/usr/bin"));
  CHECK(find_in_path("./x", "") == "./x");
  try {
    resolve_command({{"ddprun-no-such-command"}, false, false, "python3"}, "/bin:/usr/bin");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.exit_code() == 127);
    CHECK(std::string(e.what()).find("ddprun-no-such-command") != std::string::npos);
  }
  try {
    resolve_command({{"missing_script.py"}, false, false, "sh"}, "/bin:/usr/bin");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.exit_code() == 127);
    CHECK(std::string(e.what()) == "no such file: missing_script.py");
  }
}

TEST_CASE("resolve_command: a missing interpreter, a directory, a missing path") {
  agent_test::TempDir dir;
  const std::string script = dir / "train.py";
  std::ofstream(script) << "print(1)\n";
  auto fails = [](const CommandSpec& spec) -> std::pair<int, std::string> {
    try {
      resolve_command(spec, "/bin:/usr/bin");
    } catch (const Error& e) {
      return {e.exit_code(), e.what()};
    }
    return {0, ""};
  };
  // -m has no script to check, but the interpreter must exist, in PATH or at the given path.
  auto f = fails({{"pkg"}, false, true, "/nonexistent/python"});
  CHECK(f.first == 127);
  CHECK_THAT(f.second, Catch::StartsWith("python interpreter '/nonexistent/python' not found;"));
  f = fails({{script}, false, false, "ddprun-no-such-python"});
  CHECK(f.first == 127);
  CHECK_THAT(f.second, Catch::StartsWith("python interpreter 'ddprun-no-such-python' not found in PATH"));
  f = fails({{script}, false, false, dir.path().string()});
  CHECK(f.first == 126);
  CHECK_THAT(f.second, Catch::Contains("is a directory"));
  f = fails({{dir.path().string()}, false, false, "python3"});
  CHECK(f.first == 126);
  CHECK(f.second == "is a directory: " + dir.path().string() + "; give the program to run");
  f = fails({{dir / "nothing-here"}, false, false, "python3"});
  CHECK(f.first == 127);
  CHECK(f.second == "no such file: " + (dir / "nothing-here"));
  const auto ok = resolve_command({{script, "x"}, false, false, "sh"}, "/bin:/usr/bin");
  CHECK(ok.program.find("/sh") != std::string::npos);
  CHECK(ok.argv == std::vector<std::string>{"sh", "-u", script, "x"});
}

TEST_CASE("worker environment is the agent's with the plan's variables on top") {
  const auto env = merge_environment({"A=1", "B=2", "PATH=/bin", "A=shadowed"}, {{"B", "x"}, {"RANK", "3"}});
  CHECK(env == std::vector<std::string>{"A=1", "B=x", "PATH=/bin", "RANK=3"});
}

TEST_CASE("exec errors are named for the user") {
  CHECK(describe_exec_error(ENOENT, "/no/such/prog").first == "no such file: /no/such/prog");
  CHECK(describe_exec_error(ENOENT, "/no/such/prog").second == 127);
  CHECK(describe_exec_error(EACCES, "/etc/passwd").first == "permission denied: /etc/passwd");
  CHECK(describe_exec_error(EACCES, "/etc/passwd").second == 126);
}

TEST_CASE("failure records survive a JSON round trip (what nodes exchange)") {
  Failure f = failure_at(3, 1234567, 139);
  f.signal = SIGSEGV;
  f.node_rank = 2;
  f.local_rank = 1;
  f.reason = "killed by SIGSEGV";
  f.stderr_tail = {"a", "b"};
  const auto j = failure_to_json(f);
  CHECK(j.at("signal_name") == "SIGSEGV");
  const Failure g = failure_from_json(nlohmann::json::parse(j.dump()));
  CHECK(g.host == f.host);
  CHECK(g.rank == 3);
  CHECK(g.local_rank == 1);
  CHECK(g.node_rank == 2);
  CHECK(g.exit_code == 139);
  CHECK(g.signal == SIGSEGV);
  CHECK(g.pid == f.pid);
  CHECK(g.time == f.time);
  CHECK(g.stderr_tail == f.stderr_tail);
  CHECK_THROWS_AS(failure_from_json(nlohmann::json{{"host", "x"}}), ddprun::core::Error);
}

TEST_CASE("report puts the root cause first and the summary has one row per worker") {
  RunResult r;
  r.exit_code = 3;
  r.host = "n1";
  r.root_cause = failure_at(1, 1000, 3);
  r.root_cause->reason = "exited with code 3";
  r.root_cause->stderr_tail = {"Traceback", "ValueError: boom"};
  WorkerExit a;
  a.rank = 0;
  a.host = "n1";
  a.pid = 100;
  a.status = {143, SIGTERM};
  a.stopped_by_ddprun = true;
  a.reason = "killed by SIGTERM (stopped by ddprun)";
  a.duration = std::chrono::milliseconds(1500);
  WorkerExit b;
  b.rank = 1;
  b.local_rank = 1;
  b.host = "n1";
  b.pid = 101;
  b.status = {3, 0};
  b.reason = "exited with code 3";
  r.exits = {a, b};
  const std::string rep = format_report(r);
  const auto root = rep.find("Root cause");
  const auto other = rep.find("Other failures");
  REQUIRE(root != std::string::npos);
  REQUIRE(other != std::string::npos);
  CHECK(root < other);
  CHECK(rep.find("ValueError: boom") < other);
  CHECK(rep.find("1970-01-01T00:00:01.000Z") != std::string::npos);
  CHECK(rep.find("rank 0 (local rank 0) on n1: killed by SIGTERM") != std::string::npos);
  const std::string sum = format_summary(r);
  CHECK(sum.find("SIGTERM (143) *") != std::string::npos);
  CHECK(sum.find("1.50s") != std::string::npos);
  CHECK(agent_test::split_lines(sum).size() == 5);  // header, columns, 2 rows, footnote
  const auto j = report_to_json(r);
  CHECK(j.at("root_cause").at("rank") == 1);
  CHECK(j.at("workers").size() == 2);
  // A hang this node declared: the hung rank's row says it hung before how the teardown ended it.
  r.root_cause->hang = true;
  r.root_cause->rank = 0;
  r.root_cause->silent = {{0, 2.5}};
  r.exits = {a};
  const std::string hung = format_summary(r);
  CHECK_THAT(hung, Catch::Contains("      0     0  n1    hung, SIGTERM (143) *     1.50s\n"));
  // Another node's hang: this node's ranks were only stopped.
  r.root_cause->node_rank = 1;
  CHECK_THAT(format_summary(r), Catch::Contains("  SIGTERM (143) *") && !Catch::Contains("hung,"));
}
