// ddprun's own messages as JSON events (--log-format json) and colour on TTYs only.
#include <fcntl.h>
#include <pty.h>
#include <catch2/catch.hpp>
#include <csignal>
#include <mutex>
#include <regex>

#include "agent/events.hpp"
#include "agent_test_util.hpp"

using namespace agent_test;
using namespace ddprun::agent;
using nlohmann::json;

namespace {

// Every line must be a JSON object carrying the common keys; returns them in order.
std::vector<json> parse_events(const std::string& text) {
  std::vector<json> events;
  for (const auto& line : split_lines(text)) {
    INFO("line: " << line);
    const json j = json::parse(line);  // throws (fails the test) on anything but JSON
    REQUIRE(j.is_object());
    REQUIRE(j.contains("time"));
    REQUIRE(j.contains("event"));
    REQUIRE(j.contains("host"));
    REQUIRE(j.contains("node_rank"));
    CHECK(std::regex_match(j.at("time").get<std::string>(),
                           std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")));
    events.push_back(j);
  }
  return events;
}

std::vector<std::string> names(const std::vector<json>& events) {
  std::vector<std::string> n;
  for (const auto& e : events) n.push_back(e.at("event").get<std::string>());
  return n;
}

std::vector<json> of_kind(const std::vector<json>& events, const std::string& name) {
  std::vector<json> out;
  for (const auto& e : events) {
    if (e.at("event") == name) out.push_back(e);
  }
  return out;
}

std::string strip_ansi(const std::string& s) {
  return std::regex_replace(s, std::regex("\x1b\\[[0-9;]*m"), "");
}

// Restores one environment variable when the test ends.
class EnvGuard {
 public:
  explicit EnvGuard(const char* name) : name_(name) {
    const char* v = std::getenv(name);
    if (v != nullptr) old_ = v;
  }
  ~EnvGuard() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

class QuietCoordinator : public Coordinator {
 public:
  PublishOutcome publish_failure(const Failure& f, std::chrono::milliseconds) override { return {f, {}}; }
  void set_remote_abort_handler(AbortHandler h) override {
    std::lock_guard lk(m);
    handler = std::move(h);
  }
  BarrierOutcome exit_barrier() override { return {}; }
  void abort(const Failure& f) {
    AbortHandler h;
    {
      std::lock_guard lk(m);
      h = handler;
    }
    if (h) h(f, true);
  }
  std::mutex m;
  AbortHandler handler;
};

}  // namespace

TEST_CASE("an event line starts with time and event, then the context and the fields") {
  const std::string line = format_event("2026-11-22T03:14:05.123Z", "worker_started", "node1", 2,
                                        {{"rank", 5}, {"argv", {"a", "b"}}});
  CHECK(line.rfind(R"({"time":"2026-11-22T03:14:05.123Z","event":"worker_started","host":"node1",)", 0) == 0);
  const json j = json::parse(line);
  CHECK(j.at("node_rank") == 2);
  CHECK(j.at("rank") == 5);
  CHECK(j.at("argv") == json({"a", "b"}));
  CHECK(line.find('\n') == std::string::npos);

  // Unknown node rank is null; fields override the context; time and event cannot be overridden.
  const std::string overridden =
      format_event("T", "e", "h", -1, {{"host", "other"}, {"time", "x"}, {"event", "y"}, {"node_rank", 7}});
  CHECK(overridden.rfind(R"({"time":"T","event":"e","host":"other","node_rank":7})", 0) == 0);
  const json k = json::parse(overridden);
  CHECK(k.at("host") == "other");
  CHECK(k.at("node_rank") == 7);
  CHECK(k.at("time") == "T");
  CHECK(k.at("event") == "e");
  CHECK(json::parse(format_event("T", "e", "h", -1, json::object())).at("node_rank").is_null());
}

TEST_CASE("invalid UTF-8 from a worker still gives a valid JSON line") {
  const std::string bad = std::string("ab") + static_cast<char>(0xff) + "cd";
  const std::string line = format_event("T", "failure_report", "h", 0, {{"stderr_tail", {bad}}});
  const json j = json::parse(line);
  CHECK(j.at("stderr_tail").at(0).get<std::string>() ==
        "ab\xEF\xBF\xBD"
        "cd");  // U+FFFD
}

TEST_CASE("json mode: one complete line per emit, even from many threads") {
  TempDir dir;
  const std::string path = dir / "events.jsonl";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  {
    Events ev(LogFormat::json, fd);
    CHECK(ev.json());
    ev.set_context("nodeA", 3);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&ev, t] {
        for (int i = 0; i < 200; ++i) {
          ev.emit("tick", {{"thread", t}, {"i", i}, {"pad", std::string(static_cast<std::size_t>(i), 'x')}});
        }
      });
    }
    for (auto& th : threads) th.join();
  }
  ::close(fd);
  const auto events = parse_events(read_file(path));
  REQUIRE(events.size() == 800);
  std::vector<int> next(4, 0);
  for (const auto& e : events) {
    CHECK(e.at("event") == "tick");
    CHECK(e.at("host") == "nodeA");
    CHECK(e.at("node_rank") == 3);
    const int t = e.at("thread").get<int>();
    CHECK(e.at("i") == next.at(static_cast<std::size_t>(t))++);  // each thread's order kept
  }
}

TEST_CASE("text mode: emit writes nothing") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  {
    Events ev(LogFormat::text, fds[1]);
    CHECK_FALSE(ev.json());
    ev.emit("worker_started", {{"rank", 0}});
  }
  ::close(fds[1]);
  char buf[16];
  CHECK(::read(fds[0], buf, sizeof buf) == 0);
  ::close(fds[0]);
}

TEST_CASE("colour only on a TTY with a real TERM and no NO_COLOR") {
  CHECK(colour_wanted(true, "xterm-256color", nullptr));
  CHECK(colour_wanted(true, "xterm", ""));  // NO_COLOR set but empty does not count
  CHECK_FALSE(colour_wanted(false, "xterm", nullptr));
  CHECK_FALSE(colour_wanted(true, "xterm", "1"));
  CHECK_FALSE(colour_wanted(true, "dumb", nullptr));
  CHECK_FALSE(colour_wanted(true, nullptr, nullptr));

  EnvGuard term("TERM");
  EnvGuard no_color("NO_COLOR");
  ::setenv("TERM", "xterm", 1);
  ::unsetenv("NO_COLOR");

  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  CHECK_FALSE(use_colour(fds[1]));
  ::close(fds[0]);
  ::close(fds[1]);

  TempDir dir;
  const std::string path = dir / "f";
  const int file = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  REQUIRE(file >= 0);
  CHECK_FALSE(use_colour(file));
  ::close(file);

  int master = -1;
  int slave = -1;
  if (::openpty(&master, &slave, nullptr, nullptr, nullptr) != 0) {
    WARN("no pseudo-terminal available; the positive TTY case is not checked");
    return;
  }
  CHECK(use_colour(slave));
  ::setenv("NO_COLOR", "1", 1);
  CHECK_FALSE(use_colour(slave));
  ::unsetenv("NO_COLOR");
  ::setenv("TERM", "dumb", 1);
  CHECK_FALSE(use_colour(slave));
  ::close(slave);
  ::close(master);
}

TEST_CASE("coloured report and summary are the plain text plus ANSI codes") {
  RunResult r;
  r.exit_code = 3;
  r.host = "h";
  Failure f;
  f.host = "h";
  f.rank = 1;
  f.local_rank = 1;
  f.exit_code = 3;
  f.reason = "exited with code 3";
  r.root_cause = f;
  WorkerExit e;
  e.rank = 1;
  e.local_rank = 1;
  e.host = "h";
  e.status = ExitStatus{3, 0};
  r.exits.push_back(e);

  const std::string plain = format_report(r) + format_summary(r);
  const std::string coloured = format_report(r, true) + format_summary(r, true);
  CHECK(plain.find('\x1b') == std::string::npos);
  CHECK(coloured.find("\x1b[1;31mddprun: job failed with exit code 3") != std::string::npos);
  CHECK(coloured.find("\x1b[1;31mRoot cause") != std::string::npos);
  CHECK(coloured.find("\x1b[1;31mFAILED\x1b[0m") != std::string::npos);
  CHECK(strip_ansi(coloured) == plain);

  r.success = true;
  r.exit_code = 0;
  r.root_cause.reset();
  r.exits[0].status = ExitStatus{};
  CHECK(format_summary(r, true).find("\x1b[32msuccess\x1b[0m") != std::string::npos);
  CHECK(strip_ansi(format_summary(r, true)) == format_summary(r));
}

TEST_CASE("json mode success: worker_started and worker_exited per worker, then summary") {
  TempDir dir;
  Events ev(LogFormat::json, 2);
  AgentRun run(fake_options());
  run.events = &ev;
  const auto r = run_agent_in_child(dir, make_workers({"exit 0", "exit 0"}), 2, run);
  REQUIRE_FALSE(r.timed_out);
  REQUIRE(r.result.is_object());
  CHECK(r.result.at("success") == true);
  const auto events = parse_events(r.err);
  const auto n = names(events);
  REQUIRE(n.size() == 5);
  CHECK(n[0] == "worker_started");
  CHECK(n[1] == "worker_started");
  CHECK(n[4] == "summary");
  CHECK(of_kind(events, "worker_exited").size() == 2);
  CHECK(of_kind(events, "failure_report").empty());
  for (const auto& e : events) {
    CHECK(e.at("host") == "testhost");
    CHECK(e.at("node_rank") == 0);
  }
  for (int rank = 0; rank < 2; ++rank) {
    const auto& started = events.at(static_cast<std::size_t>(rank));
    CHECK(started.at("rank") == rank);
    CHECK(started.at("local_rank") == rank);
    CHECK(started.at("argv") == json({fake_worker()}));
    bool matched = false;
    for (const auto& ex : of_kind(events, "worker_exited")) {
      if (ex.at("pid") != started.at("pid")) continue;
      matched = true;
      CHECK(ex.at("rank") == rank);
      CHECK(ex.at("exit_code") == 0);
      CHECK(ex.at("signal").is_null());
      CHECK(ex.at("reason") == "exited normally");
      CHECK(ex.at("stopped_by_ddprun") == false);
      CHECK(ex.at("duration_s").is_number());
    }
    CHECK(matched);
  }
  const auto& summary = events.back();
  CHECK(summary.at("success") == true);
  CHECK(summary.at("exit_code") == 0);
  CHECK(summary.at("attempt") == 0);
  REQUIRE(summary.at("workers").size() == 2);
  CHECK(summary.at("workers").at(0).at("host") == "testhost");
  CHECK(summary.at("workers").at(0).at("exit") == 0);
  CHECK(summary.at("workers").at(0).contains("duration_s"));
  CHECK(r.out.empty());
}

TEST_CASE("json mode failure: teardown, failure report and summary - worker output untouched") {
  TempDir dir;
  Events ev(LogFormat::json, 2);
  AgentRun run(fake_options());
  run.events = &ev;
  run.opts.quiet = true;  // --quiet only affects text output: the events still come
  const auto r = run_agent_in_child(dir, make_workers({"hang", "sleep 50 eprint boom exit 3"}), 2, run);
  REQUIRE_FALSE(r.timed_out);
  REQUIRE(r.result.is_object());
  CHECK(r.result.at("exit_code") == 3);

  // The worker's own stderr line is relayed as always; everything else is ddprun's, and JSON.
  std::string ours;
  int worker_lines = 0;
  for (const auto& l : split_lines(r.err)) {
    if (l == "[1]: boom") {
      ++worker_lines;
    } else {
      ours += l + "\n";
    }
  }
  CHECK(worker_lines == 1);
  const auto events = parse_events(ours);
  const std::vector<std::string> expected{"worker_started", "worker_started", "worker_exited", "teardown",
                                          "worker_exited",  "failure_report", "summary"};
  CHECK(names(events) == expected);
  REQUIRE(events.size() == expected.size());

  const auto& first_exit = events[2];
  CHECK(first_exit.at("rank") == 1);
  CHECK(first_exit.at("exit_code") == 3);
  CHECK(first_exit.at("stopped_by_ddprun") == false);
  const auto& teardown = events[3];
  CHECK(teardown.at("reason") == "worker_failed");
  CHECK(teardown.at("signal") == "SIGTERM");
  CHECK(teardown.at("root_cause").at("rank") == 1);
  CHECK(teardown.at("root_cause").at("exit_code") == 3);
  const auto& stopped = events[4];
  CHECK(stopped.at("rank") == 0);
  CHECK(stopped.at("signal") == "SIGTERM");
  CHECK(stopped.at("stopped_by_ddprun") == true);
  CHECK(stopped.at("reason") == "killed by SIGTERM (stopped by ddprun)");

  // failure_report carries the same content as the JSON report file.
  json report = events[5];
  report.erase("time");
  report.erase("event");
  CHECK(report == r.result);
  CHECK(report.at("root_cause").at("stderr_tail") == json({"boom"}));

  const auto& summary = events[6];
  CHECK(summary.at("success") == false);
  CHECK(summary.at("exit_code") == 3);
  CHECK(summary.at("workers").size() == 2);
}

TEST_CASE("text mode output is unchanged: no JSON and no colour through a pipe or file") {
  TempDir dir;
  Events ev(LogFormat::text, 2);
  AgentRun run(fake_options());
  run.events = &ev;
  const auto r = run_agent_in_child(dir, make_workers({"hang", "sleep 50 exit 3"}), 2, run, {}, [] {
    ::setenv("TERM", "xterm", 1);  // stderr is a file: still no colour
    ::unsetenv("NO_COLOR");
  });
  REQUIRE(r.result.is_object());
  CHECK(r.err.find('\x1b') == std::string::npos);
  CHECK(r.err.find("\"event\"") == std::string::npos);
  CHECK(r.err.rfind("ddprun: job failed with exit code 3 (attempt 0, node 0, host testhost)\n", 0) == 0);
  CHECK(r.err.find("Root cause (first observed failure):\n") != std::string::npos);
  CHECK(r.err.find("ddprun: summary (attempt 0, node 0): FAILED, exit code 3\n") != std::string::npos);
}

TEST_CASE("json mode: a stopping signal to the agent is an event and the teardown's reason") {
  TempDir dir;
  Events ev(LogFormat::json, 2);
  AgentRun run(fake_options());
  run.events = &ev;
  const auto r = run_agent_in_child(
      dir, make_workers({"trap-term " + (dir / "term") + " touch " + (dir / "ready") + " hang"}), 1, run,
      [&](pid_t agent) {
        REQUIRE(wait_for_file(dir / "ready"));
        ::kill(agent, SIGTERM);
      });
  REQUIRE(r.result.is_object());
  CHECK(r.result.at("exit_code") == 143);
  const auto events = parse_events(r.err);
  const std::vector<std::string> expected{"worker_started", "signal_received", "teardown",
                                          "worker_exited",  "failure_report",  "summary"};
  CHECK(names(events) == expected);
  REQUIRE(events.size() == expected.size());
  CHECK(events[1].at("signal") == "SIGTERM");
  CHECK(events[1].at("action") == "teardown");
  CHECK(events[2].at("reason") == "signal");
  CHECK(events[2].at("root_cause").at("rank") == -1);
  CHECK(events[3].at("exit_code") == 0);  // the worker trapped TERM and exited 0
  CHECK(events[5].at("exit_code") == 143);
}

TEST_CASE("json mode: a command that cannot start is an event, not a text line") {
  TempDir dir;
  Events ev(LogFormat::json, 2);
  AgentRun run(fake_options());
  run.opts.command = {"/nonexistent/ddprun-prog", "arg"};
  run.events = &ev;
  const auto r = run_agent_in_child(dir, make_workers({"", ""}), 2, run);
  REQUIRE(r.result.is_object());
  CHECK(r.result.at("exit_code") == 127);
  const auto events = parse_events(r.err);
  CHECK(names(events) == std::vector<std::string>{"spawn_failed", "failure_report", "summary"});
  REQUIRE(events.size() == 3);
  CHECK(events[0].at("rank") == 0);
  CHECK(events[0].at("exit_code") == 127);
  CHECK(events[0].at("error").get<std::string>().find("/nonexistent/ddprun-prog") != std::string::npos);
  CHECK(events[0].at("command") == json({"/nonexistent/ddprun-prog", "arg"}));
  CHECK(events[2].at("exit_code") == 127);
}

TEST_CASE("json mode: another node's failure gives remote_abort, then teardown") {
  TempDir dir;
  const std::string path = dir / "events.jsonl";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  Events ev(LogFormat::json, fd);
  const auto opts = fake_options();
  QuietCoordinator c;
  std::thread other([&] {
    if (!wait_for_file(dir / "ready0")) return;
    Failure f;
    f.host = "othernode";
    f.node_rank = 1;
    f.rank = 5;
    f.exit_code = 42;
    f.reason = "exited with code 42";
    f.time = ddprun::core::failure_now();
    c.abort(f);
  });
  const auto r = run_workers(make_workers({"touch " + (dir / "ready0") + " hang"}), 2, opts, {}, c, &ev);
  other.join();
  ::close(fd);
  CHECK(r.exit_code == 42);
  const auto events = parse_events(read_file(path));
  const std::vector<std::string> expected{"worker_started", "remote_abort",   "teardown",
                                          "worker_exited",  "failure_report", "summary"};
  CHECK(names(events) == expected);
  REQUIRE(events.size() == expected.size());
  CHECK(events[1].at("root_cause").at("host") == "othernode");
  CHECK(events[1].at("root_cause").at("rank") == 5);
  CHECK(events[2].at("reason") == "remote_abort");
  CHECK(events[4].at("remote_abort") == true);
  CHECK(events[5].at("exit_code") == 42);
}
