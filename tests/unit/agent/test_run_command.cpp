// The one runner of short helper commands (agent/run_command.hpp): real processes, real signals.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#include <catch2/catch.hpp>
#include <csignal>
#include <string>
#include <vector>

#include "agent/run_command.hpp"
#include "agent_test_util.hpp"

using namespace agent_test;
using ddprun::agent::CommandRequest;
using ddprun::agent::CommandResult;
using ddprun::agent::run_command;
using ddprun::agent::shell_command;

namespace {

CommandResult sh(const std::string& script, std::chrono::milliseconds timeout = 60s) {
  return run_command(CommandRequest{shell_command(script), timeout});
}

// A live process (not a zombie).
bool alive(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

bool eventually(const std::function<bool()>& ok) {
  const auto end = std::chrono::steady_clock::now() + 10s;
  while (!ok()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

}  // namespace

TEST_CASE("run_command: its output, its exit code and a signal's end, decoded once", "[run]") {
  const auto ok = sh("echo out; echo err >&2; exit 3");
  CHECK_FALSE(ok.not_started);
  CHECK_FALSE(ok.timed_out);
  CHECK(ok.output == "out\nerr\n");
  CHECK(ok.status.exit_code == 3);
  CHECK(ok.status.signal == 0);
  CHECK_FALSE(ok.succeeded());
  CHECK(ddprun::agent::describe_run(ok, 60s) == "exited with code 3");
  CommandRequest quiet{shell_command("echo out; echo err >&2"), 60s};
  quiet.stderr_too = false;
  const auto out_only = run_command(quiet);
  CHECK(out_only.output == "out\n");
  CHECK(out_only.succeeded());
  const auto killed = sh("kill -TERM $$");
  CHECK(killed.status.signal == SIGTERM);
  CHECK(killed.status.exit_code == 128 + SIGTERM);
  CHECK(ddprun::agent::describe_run(killed, 60s) == "killed by SIGTERM");
}

TEST_CASE("run_command: a program not on PATH is not started, and that says so", "[run]") {
  CommandRequest req{{"ddprun-no-such-program", "-x"}, 60s};
  const auto r = run_command(req);
  CHECK(r.not_found);
  REQUIRE(r.not_started);
  CHECK(*r.not_started == "ddprun-no-such-program not found on PATH");
  req.argv = {"true"};
  req.path_env = "/nonexistent";
  CHECK(run_command(req).not_found);
  req.path_env = "/usr/bin:/bin";
  CHECK(run_command(req).succeeded());
}

TEST_CASE("run_command: at the deadline its whole process group is killed", "[run]") {
  TempDir dir;
  const auto r = sh("sleep 600 & echo $! > " + dir / "bg" + "; echo started; sleep 600", 300ms);
  CHECK(r.timed_out);
  CHECK(r.output == "started\n");
  CHECK(ddprun::agent::describe_run(r, 300ms) == "did not finish within 0.3 s");
  const pid_t bg = std::stoi(read_file(dir / "bg"));
  CHECK(eventually([&] { return !alive(bg); }));
}

TEST_CASE("run_command: stop_when ends the run at once, its whole group killed, no exit status", "[run]") {
  TempDir dir;
  CommandRequest req{shell_command("sleep 600 & echo $! > " + dir / "bg" + "; echo started; sleep 600"), 60s};
  int asked = 0;
  req.stop_when = [&] {  // once the background child is known, at a later look
    const std::string bg = read_file(dir / "bg");
    return !bg.empty() && bg.back() == '\n' && ++asked >= 2;
  };
  const auto start = std::chrono::steady_clock::now();
  const auto r = run_command(req);
  CHECK(std::chrono::steady_clock::now() - start < 10s);
  CHECK(r.stopped_when);
  CHECK_FALSE(r.timed_out);
  CHECK_FALSE(r.stopped);
  CHECK_FALSE(r.succeeded());
  CHECK(r.status.exit_code == 0);
  CHECK(r.status.signal == 0);
  const pid_t bg = std::stoi(read_file(dir / "bg"));
  CHECK(eventually([&] { return !alive(bg); }));
  // A command that ends before stop_when says so is not stopped.
  CommandRequest quick{shell_command("exit 4"), 60s};
  quick.stop_when = [] { return false; };
  const auto q = run_command(quick);
  CHECK_FALSE(q.stopped_when);
  CHECK(q.status.exit_code == 4);
}

TEST_CASE("run_command: a background child holding the output keeps no one waiting, and goes with the run",
          "[run]") {
  TempDir dir;
  const auto r = sh("sleep 600 & echo $! > " + dir / "bg" + "; echo done");
  CHECK_FALSE(r.timed_out);
  CHECK(r.succeeded());
  CHECK(r.output == "done\n");
  const pid_t bg = std::stoi(read_file(dir / "bg"));
  CHECK(eventually([&] { return !alive(bg); }));
}

TEST_CASE("run_command: the command starts with default signals and an empty mask, unless asked", "[run]") {
  // What the caller ignores or blocks (ddprun's hold, a batch script's TERM ignored) is not the command's.
  struct sigaction ign {
  }, old{};
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  REQUIRE(::sigaction(SIGTERM, &ign, &old) == 0);
  sigset_t usr1, old_mask;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  ::pthread_sigmask(SIG_BLOCK, &usr1, &old_mask);
  const auto term = sh("kill -TERM $$; echo survived");
  const auto usr = sh("kill -USR1 $$; echo survived");
  CommandRequest keep{shell_command("kill -TERM $$; echo survived"), 60s};
  keep.ignored_signals = {SIGTERM};
  const auto kept = run_command(keep);
  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  ::sigaction(SIGTERM, &old, nullptr);
  CHECK(term.status.signal == SIGTERM);
  CHECK(usr.status.signal == SIGUSR1);
  CHECK(kept.succeeded());
  CHECK(kept.output == "survived\n");
}

TEST_CASE("run_command: only stdin, stdout and stderr reach the command", "[run]") {
  const int fd = ::open("/dev/null", O_RDONLY);  // no O_CLOEXEC: a plain fork and exec would pass it on
  REQUIRE(fd > 2);
  const auto r = sh("ls /proc/$$/fd");
  ::close(fd);
  CHECK(r.output == "0\n1\n2\n");
}

TEST_CASE("run_command: output past the cap keeps its first bytes, or its last", "[run]") {
  CommandRequest req{shell_command("head -c 100000 /dev/zero | tr '\\0' a; echo; echo end"), 60s};
  req.output_cap = 1000;
  const auto head = run_command(req);
  CHECK(head.output == std::string(1000, 'a'));
  CHECK(head.dropped == 100005 - 1000);
  req.keep_tail = true;
  const auto tail = run_command(req);
  CHECK(tail.output.size() == 1000);
  CHECK(tail.output.substr(tail.output.size() - 5) == "\nend\n");
  CHECK(tail.dropped == 100005 - 1000);
}

TEST_CASE("keep_output: the first or the last bytes within the cap, the rest counted", "[run]") {
  struct Row {
    std::vector<std::string> pieces;
    bool tail;
    std::string text;
    std::size_t dropped;
  };
  const std::vector<Row> rows = {
      {{"abc", "def"}, false, "abcd", 2}, {{"abc", "def"}, true, "cdef", 2},
      {{"ab", "cd"}, false, "abcd", 0},   {{"abcdef"}, true, "cdef", 2},
      {{"", "x"}, false, "x", 0},         {{"abcdefgh", "ij"}, true, "ghij", 6},
  };
  for (const auto& r : rows) {
    std::string text;
    std::size_t dropped = 0;
    for (const auto& p : r.pieces) ddprun::agent::keep_output(text, dropped, p, 4, r.tail);
    CHECK(text == r.text);
    CHECK(dropped == r.dropped);
  }
}
