// Lines that redraw themselves (progress bars, dots): the splitter keeps what a terminal shows, the
// pace and the terminal fit are pure; with real workers, the relay writes a bar to a file or pipe at
// most once per interval, draws it in place on a real pseudo-terminal, and any output is progress
// for --hang-timeout.
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <catch2/catch.hpp>
#include <regex>

#include "agent/events.hpp"
#include "agent_test_util.hpp"
#include "log_relay.hpp"
#include "redraw.hpp"

using namespace agent_test;
using namespace ddprun::agent;

namespace {

std::vector<std::string> feed_all(LineSplitter& s, const std::vector<std::string>& chunks, bool finish) {
  std::vector<std::string> lines;
  auto add = [&](std::string_view l) { lines.emplace_back(l); };
  for (const auto& c : chunks) s.feed(c, add);
  if (finish) s.finish(add);
  return lines;
}

// The lines of `text` made by fake_worker's `bar N MS` ("bar I/N"), with `prefix`.
std::vector<int> bar_steps(const std::string& text, const std::string& prefix = "") {
  std::vector<int> steps;
  for (const auto& l : split_lines(text)) {
    int i = 0;
    int n = 0;
    if (l.rfind(prefix + "bar ", 0) == 0 &&
        std::sscanf(l.c_str() + prefix.size(), "bar %d/%d", &i, &n) == 2) {
      steps.push_back(i);
    }
  }
  return steps;
}

}  // namespace

TEST_CASE("line splitter: a carriage return starts the line over, as on a terminal") {
  LineSplitter s;
  CHECK(feed_all(s, {"10%\r20%\r30%\n"}, false) == std::vector<std::string>{"30%"});
  CHECK(feed_all(s, {"dos\r\n", "trailing\r\r\n"}, false) == std::vector<std::string>{"dos", "trailing"});
  // Redraws across reads, tqdm's way (\r first) and the other way (\r last).
  CHECK(feed_all(s, {"\rbar 1", "\rbar 2", "\rbar 3"}, false).empty());
  CHECK(s.open_line() == "bar 3");
  CHECK(s.pending_size() == 5);  // only the latest redraw is kept
  CHECK(feed_all(s, {"\n"}, false) == std::vector<std::string>{"bar 3"});
  CHECK(feed_all(s, {"one\r", "two\r"}, false).empty());
  CHECK(s.open_line() == "two");
  CHECK(feed_all(s, {"\n"}, false) == std::vector<std::string>{"two"});
  // Dots: the open line grows.
  CHECK(feed_all(s, {".", "..", "."}, false).empty());
  CHECK(s.open_line() == "....");
  CHECK(feed_all(s, {" done\nnext"}, false) == std::vector<std::string>{".... done"});
  CHECK(s.open_line() == "next");
  CHECK(feed_all(s, {}, true) == std::vector<std::string>{"next"});
  CHECK(s.open_line().empty());
  // A stream that ends on a bare carriage return ends with nothing to show.
  CHECK(feed_all(s, {"\r"}, true).empty());
}

TEST_CASE("line splitter: a bar that never writes a newline holds one redraw, not its history") {
  LineSplitter s;
  std::vector<std::string> lines;
  for (int i = 0; i < 100000; ++i) {
    s.feed("\rstep " + std::to_string(i), [&](std::string_view l) { lines.emplace_back(l); });
  }
  CHECK(lines.empty());
  CHECK(s.pending_size() == std::string("step 99999").size());
  s.finish([&](std::string_view l) { lines.emplace_back(l); });
  CHECK(lines == std::vector<std::string>{"step 99999"});
  // A huge line without carriage returns is still cut into pieces.
  LineSplitter small(4);
  CHECK(feed_all(small, {"abcdefghij", "\rxy\n"}, false) == std::vector<std::string>{"abcd", "efgh", "xy"});
}

TEST_CASE("redraw pace: shown once open for an interval, then at most once per interval") {
  using ms = std::chrono::milliseconds;
  const RedrawClock::time_point t0{};
  RedrawPace p(ms(1000));
  CHECK_FALSE(p.deadline());
  p.changed(t0);
  CHECK_FALSE(p.due(t0 + ms(999)));  // a line written in pieces is not shown in halves
  CHECK(p.deadline() == t0 + ms(1000));
  CHECK(p.due(t0 + ms(1000)));
  p.shown(t0 + ms(1000));
  CHECK_FALSE(p.due(t0 + ms(5000)));  // nothing new since
  CHECK_FALSE(p.deadline());
  p.changed(t0 + ms(1100));
  CHECK_FALSE(p.due(t0 + ms(1999)));
  CHECK(p.due(t0 + ms(2000)));
  p.closed();
  CHECK_FALSE(p.deadline());
  // The next line of the same stream: open for an interval, and an interval after the last showing.
  p.changed(t0 + ms(1500));
  CHECK(p.deadline() == t0 + ms(2500));
  p.shown(t0 + ms(2500));
  p.closed();
  p.changed(t0 + ms(2600));
  CHECK(p.deadline() == t0 + ms(3600));
}

TEST_CASE("terminal fit: cut to the width less one column, escape sequences take none") {
  struct Row {
    std::string in;
    int columns;
    std::string out;
  };
  const std::vector<Row> rows = {
      {"abc", 80, "abc"},
      {"abcdef", 4, "abc"},
      {"\xC3\xA9\xE2\x82\xAC"
       "x",
       3, "\xC3\xA9\xE2\x82\xAC"},                     // two characters of five bytes
      {"\x1b[32m###\x1b[0m", 3, "\x1b[32m##\x1b[0m"},  // a reset after a cut colour
      {"\x1b[1mab\x1b[0m", 80, "\x1b[1mab\x1b[0m\x1b[0m"},
      {"\xFF\xFEz", 3, "\xFF\xFE"},  // bytes that are not UTF-8: a column each
      {"ab", 1, "a"},
  };
  for (const auto& r : rows) {
    INFO(r.in << " in " << r.columns);
    CHECK(fit_terminal_width(r.in, r.columns) == r.out);
  }
  CHECK(redraw_terminal_wanted(true, "xterm-256color"));
  CHECK_FALSE(redraw_terminal_wanted(false, "xterm"));
  CHECK_FALSE(redraw_terminal_wanted(true, "dumb"));
  CHECK_FALSE(redraw_terminal_wanted(true, nullptr));
  CHECK_FALSE(redraw_terminal_wanted(true, ""));
}

TEST_CASE("output that is only a bar or dots is progress: no hang") {
  TempDir dir;
  auto opts = fake_options();
  opts.hang_timeout = 1000ms;
  // Rank 0 redraws a bar on stderr, rank 1 prints dots on stdout: 3 s each, no newline ever.
  const auto r = run_agent_in_child(dir, make_workers({"bar 30 100", "dots 30 100"}), 2, opts);
  REQUIRE(r.result.is_object());
  INFO(r.err);
  CHECK(r.result.at("exit_code") == 0);
  CHECK_THAT(r.err, !Catch::Contains("hang"));
  // The bar's last redraw and the dots are lines once the streams ended.
  const auto steps = bar_steps(r.err, "[0]: ");
  REQUIRE_FALSE(steps.empty());
  CHECK(steps.back() == 30);
  CHECK_THAT(r.out, Catch::Contains("[1]: " + std::string(30, '.') + "\n"));
}

TEST_CASE("a bar to a pipe or file: one line per redraw interval at most, its last redraw once") {
  TempDir dir;
  auto opts = fake_options();
  opts.redraw_interval = 1000ms;
  opts.log_dir = dir / "logs";
  // 300 redraws over 3 s, then the worker ends with the bar open.
  const auto start = std::chrono::steady_clock::now();
  const auto r = run_agent_in_child(dir, make_workers({"bar 300 10"}), 1, opts);
  const auto took =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - start);
  REQUIRE(r.result.is_object());
  CHECK(r.result.at("exit_code") == 0);
  const std::string file = read_file(dir / "logs/attempt_0/rank_0/stderr.log");
  for (const std::string& text : {r.err.substr(0, r.err.find("ddprun: summary")), file}) {
    INFO(text);
    const auto steps = bar_steps(text);
    REQUIRE(steps.size() >= 2);  // a redraw while it ran (3 s, open for more than 1 s) and the last
    CHECK(steps.size() <= static_cast<std::size_t>(took.count()) + 1);
    CHECK(std::is_sorted(steps.begin(), steps.end()));
    CHECK(steps.back() == 300);
    CHECK(std::count(steps.begin(), steps.end(), 300) == 1);
    CHECK(split_lines(text).size() == steps.size());  // nothing else: no piece of a redraw
  }
}

TEST_CASE("empty lines and lines written in pieces are relayed as they are") {
  TempDir dir;
  auto opts = fake_options();
  opts.log_dir = dir / "logs";
  const auto r = run_agent_in_child(dir, make_workers({"write a\\n\\nb write c write d\\n\\n"}), 1, opts);
  REQUIRE(r.result.is_object());
  CHECK(r.out == "a\n\nbcd\n\n");
  CHECK(read_file(dir / "logs/attempt_0/rank_0/stdout.log") == "a\n\nbcd\n\n");
}

namespace {

// The agent run with its stderr on a real pseudo-terminal (60 columns, TERM=xterm): its result, what
// the terminal received and how long it took. The terminal is read until the agent exits (reaped after).
struct PtyRun {
  ChildRun run;
  std::string screen;
  double seconds = 0;
};

PtyRun run_on_pty(const TempDir& dir, const std::vector<ddprun::core::Worker>& workers, int world,
                  const AgentRun& run) {
  int master = -1;
  int slave = -1;
  winsize ws{};
  ws.ws_col = 60;
  ws.ws_row = 20;
  REQUIRE(::openpty(&master, &slave, nullptr, nullptr, &ws) == 0);
  ::fcntl(master, F_SETFL, O_NONBLOCK);
  PtyRun out;
  const auto drain = [&] {
    char buf[4096];
    ssize_t n = 0;
    while ((n = ::read(master, buf, sizeof buf)) > 0) out.screen.append(buf, static_cast<std::size_t>(n));
  };
  const auto start = std::chrono::steady_clock::now();
  out.run = run_agent_in_child(
      dir, workers, world, run,
      [&](pid_t pid) {
        const auto end = std::chrono::steady_clock::now() + 60s;
        for (siginfo_t info{}; info.si_pid != pid && std::chrono::steady_clock::now() < end;) {
          pollfd p{master, POLLIN, 0};
          if (::poll(&p, 1, 50) > 0) drain();
          ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT);
        }
      },
      [slave] {
        ::setenv("TERM", "xterm", 1);
        ::dup2(slave, 2);
      });
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  drain();
  ::close(master);
  ::close(slave);
  return out;
}

}  // namespace

TEST_CASE("a bar on a terminal is drawn in place, other lines go above it") {
  TempDir dir;
  // Rank 0: 200 redraws over 2 s; rank 1: two lines meanwhile.
  const auto pty = run_on_pty(
      dir, make_workers({"bar 200 10", "sleep 700 eprint hello sleep 500 eprint world"}), 2, fake_options());
  const std::string& screen = pty.screen;
  REQUIRE(pty.run.result.is_object());
  INFO(screen);
  CHECK(pty.run.result.at("exit_code") == 0);
  // Redraws in place while it ran, ten a second at most; then its last redraw as a line.
  static const std::regex draw("\r\x1b\\[K\\[0\\]: bar (\\d+)/200");
  const auto draws =
      std::distance(std::sregex_iterator(screen.begin(), screen.end(), draw), std::sregex_iterator());
  CHECK(draws >= 2);
  CHECK(draws <= static_cast<long>(pty.seconds * 10) + 3);
  CHECK_THAT(screen, Catch::Contains("[0]: bar 200/200\r\n"));
  // Rank 1's lines start a line of their own: the bar was erased first (or none was drawn).
  for (const std::string line : {"[1]: hello", "[1]: world"}) {
    const auto at = screen.find(line);
    REQUIRE(at != std::string::npos);
    CHECK((at == 0 || screen[at - 1] == '\n' || screen.compare(at - 4, 4, "\r\x1b[K") == 0));
  }
}

TEST_CASE("with --log-format json a bar on a terminal is written as lines, never drawn in place") {
  TempDir dir;
  Events ev(LogFormat::json, 2);
  AgentRun run(fake_options());
  run.events = &ev;
  run.opts.redraw_interval = 500ms;
  const auto pty = run_on_pty(dir, make_workers({"bar 200 10"}), 1, run);
  REQUIRE(pty.run.result.is_object());
  INFO(pty.screen);
  CHECK(pty.run.result.at("exit_code") == 0);
  CHECK_THAT(pty.screen, !Catch::Contains("\x1b[K"));
  const auto steps = bar_steps(pty.screen);
  CHECK(steps.size() >= 2);  // a redraw while it ran (2 s, the interval 0.5 s) and the last
  CHECK(steps.size() <= static_cast<std::size_t>(pty.seconds / 0.5) + 2);
  CHECK(std::is_sorted(steps.begin(), steps.end()));
}

TEST_CASE("a redrawn line's bytes reach a file as written, a character cut by a read held back") {
  TempDir dir;
  auto opts = fake_options();
  opts.redraw_interval = 300ms;
  opts.log_dir = dir / "logs";
  // An open line first of half a character (a read cut it), then the rest and a byte that is not
  // UTF-8, each kept open for several intervals, then its newline.
  const auto r = run_agent_in_child(
      dir, make_workers({"ewrite \\rab\\xc3 sleep 1000 ewrite \\xa9\\xff sleep 1000 ewrite \\n"}), 1, opts);
  INFO(r.err);
  REQUIRE(r.result.is_object());
  CHECK(r.result.at("exit_code") == 0);
  const std::string file = read_file(dir / "logs/attempt_0/rank_0/stderr.log");
  // "ab" while the character was cut, then the whole line once (its final text is its last redraw).
  CHECK(file == "ab\nab\xc3\xa9\xff\n");
}
