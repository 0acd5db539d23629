#include "launcher/observe/top.hpp"

#include <poll.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/json.hpp"
#include "job_query.hpp"
#include "launcher/observe/job_locator.hpp"
#include "launcher/observe/top_view.hpp"
#include "store/client.hpp"
#include "store/error.hpp"

namespace ddprun::launcher {

namespace {

constexpr int kRefreshMs = 1000;
// How long the live view looks for a store that closed without the job's end: a failover takes the
// survivors' teardown (--term-timeout) and the node-0 timeout.
constexpr std::chrono::seconds kFailoverWait{60};

volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) {
  g_stop_signal = sig;
}
extern "C" void on_winch(int) {}

std::int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void write_all_out(const std::string& s) {
  std::size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::write(STDOUT_FILENO, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<std::size_t>(n);
  }
}

// The live view's terminal: keys one at a time without echo (Ctrl-C arrives as a key), the alternate
// screen, the cursor hidden. The destructor puts back exactly what it found, however the view ends.
class TerminalSession {
 public:
  TerminalSession() {
    if (::tcgetattr(STDIN_FILENO, &saved_) != 0) {
      throw core::Error("the live view needs a terminal on stdin; use --once for a snapshot",
                        core::kUsageExit);
    }
    termios raw = saved_;
    raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO | ISIG);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    ::tcsetattr(STDIN_FILENO, TCSANOW, &raw);
    write_all_out("\x1b[?1049h\x1b[?25l");
  }
  ~TerminalSession() {
    write_all_out("\x1b[?25h\x1b[?1049l");
    ::tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  TerminalSession(const TerminalSession&) = delete;
  TerminalSession& operator=(const TerminalSession&) = delete;

 private:
  termios saved_{};
};

// Stopping signals end the view through its loop (the terminal is restored on the way out).
class StopSignals {
 public:
  StopSignals() {
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;  // no SA_RESTART: poll() returns at once
    ::sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &sa, &old_[i]);
    struct sigaction winch {};
    winch.sa_handler = on_winch;  // a resize redraws at once
    ::sigemptyset(&winch.sa_mask);
    ::sigaction(SIGWINCH, &winch, &old_winch_);
  }
  ~StopSignals() {
    for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
    ::sigaction(SIGWINCH, &old_winch_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  static constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction old_[3]{};
  struct sigaction old_winch_ {};
};

// Looks for the job again after its store closed the connection; nullptr when it is nowhere.
using Refind = std::function<std::shared_ptr<store::TcpStore>(JobTarget& found)>;

struct TopOptions {
  JobQuery query;
  bool once = false;
  std::string format = "text";
  bool by_node = false;
  bool help = false;  // --help printed
};

std::pair<std::size_t, std::size_t> terminal_size() {
  winsize ws{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
    return {ws.ws_col, ws.ws_row};
  }
  return {80, 24};
}

int run_once(const TopOptions& o, const JobTarget& t, store::TcpStore& store) {
  const auto nodes = read_job_status(store, t);
  const auto now = unix_ms_now();
  if (o.format == "json") {
    std::cout << core::dump_json(top_json(nodes, t.endpoint(), t.run_id, now)) << "\n";
  } else {
    std::cout << top_text(nodes, t.describe(), now, o.by_node);
  }
  std::cout.flush();
  return 0;
}

// What one wait between two frames ended with.
enum class Wake { redraw, toggle, quit };

// Waits up to a refresh for a key, a resize or a stopping signal.
Wake wait_for_key() {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kRefreshMs);
  for (;;) {
    if (g_stop_signal != 0) return Wake::quit;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Wake::redraw;
    pollfd p{STDIN_FILENO, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0) {
      if (errno != EINTR) return Wake::quit;
      return g_stop_signal != 0 ? Wake::quit : Wake::redraw;  // a resize: redraw now
    }
    if (r == 0) return Wake::redraw;
    char c = 0;
    const ssize_t n = ::read(STDIN_FILENO, &c, 1);
    if (n == 0 || (p.revents & (POLLHUP | POLLERR)) != 0) return Wake::quit;  // the terminal went away
    if (n < 0) continue;
    if (c == 'q' || c == 'Q' || c == 3) return Wake::quit;  // 3: Ctrl-C (ISIG is off)
    if (c == 'n' || c == 'N' || c == '\t') return Wake::toggle;
  }
}

// One frame: each line cleared to its end, the rest of the screen cleared.
void draw_text(const std::string& text) {
  std::string frame = "\x1b[H";
  std::size_t start = 0;
  while (start < text.size()) {
    const auto nl = text.find('\n', start);
    frame += text.substr(start, nl - start) + "\x1b[K";
    start = nl + 1;
    if (start < text.size()) frame += "\n";  // the terminal's output processing adds the \r
  }
  frame += "\x1b[J";
  write_all_out(frame);
}

// The job's end, pushed by node 0 just before its store closed (core::kJobEndKey, watched).
bool end_pushed(store::TcpStore& s) {
  try {
    return !s.poll_events(std::chrono::milliseconds{0}).empty();
  } catch (const store::Error&) {
    return false;
  }
}

// The live view's connection: subscribed to the job's end, so that a store closing is told apart.
std::shared_ptr<store::TcpStore> watching_end(std::shared_ptr<store::TcpStore> s) {
  s->watch("observe", std::chrono::milliseconds{0}, {core::kJobEndKey});
  return s;
}

// Draws every second until q, Ctrl-C or a stopping signal; n toggles per node / per rank. A store that
// closes after pushing the job's end: the job finished (said once the terminal is back, exit 0). One
// that closes without: node 0 was lost; the job is looked for where a failover moves its store, for
// up to kFailoverWait, then exit 1.
int run_live(const TopOptions& o, JobTarget t, std::shared_ptr<store::TcpStore> store, const Refind& refind) {
  StopSignals signals;
  std::string last_word;
  int code = 0;
  {
    TerminalSession term;
    bool by_node = o.by_node;
    g_stop_signal = 0;
    auto lost_since = std::chrono::steady_clock::now();
    for (;;) {
      std::vector<core::NodeStatus> nodes;
      try {
        if (store) nodes = read_job_status(*store, t);  // throws: the terminal is restored on the way out
      } catch (const StoreGone& e) {
        if (!e.closed()) throw;
        if (end_pushed(*store)) {
          last_word = fmt::format("the job at {} has finished", t.describe());
          break;
        }
        store.reset();
        lost_since = std::chrono::steady_clock::now();
      }
      if (!store) {
        JobTarget moved;
        if (auto next = refind(moved)) {
          store = watching_end(std::move(next));
          t = std::move(moved);
          continue;
        }
        if (std::chrono::steady_clock::now() - lost_since > kFailoverWait) {
          last_word = fmt::format(
              "the job's store at {} closed without the job ending (node 0 lost), and no "
              "store of the job answered where a node-0 failover moves it within {} s",
              t.describe(), kFailoverWait.count());
          code = kObserveExit;
          break;
        }
        draw_text(
            fmt::format("ddprun top  {}\nthe store closed without the job ending (node 0 lost?): looking "
                        "for where a node-0 failover moves it ...\n",
                        t.describe()));
      } else {
        draw_text(top_text(nodes, t.describe(), unix_ms_now(), by_node, terminal_size().first,
                           terminal_size().second, true));
      }
      const Wake w = wait_for_key();
      if (w == Wake::quit) break;
      if (w == Wake::toggle) by_node = !by_node;
    }
  }
  if (!last_word.empty()) fmt::print(stderr, "ddprun top: {}{}\n", code != 0 ? "error: " : "", last_word);
  return code;
}

TopOptions parse_top(int argc, const char* const* argv) {
  TopOptions o;
  JobQueryCli cli(
      "top",
      "Show a running ddprun job's ranks: pid, state, last output line, seconds since progress, RSS, "
      "CPU%; live like top (q or Ctrl-C quits, n toggles per node / per rank), or once.",
      o.query);
  CLI::App& app = cli.app();
  app.add_flag("--once", o.once, "Print one snapshot and exit");
  app.add_option("--format", o.format, "text or json (json prints one snapshot)")
      ->check(CLI::IsMember({"text", "json"}));
  app.add_flag("--nodes", o.by_node, "One line per node instead of per rank");
  o.help = !cli.parse(argc, argv);
  if (o.format == "json") o.once = true;
  return o;
}

}  // namespace

int top_main(int argc, const char* const* argv) {
  return run_job_query("top", [&] {
    const TopOptions o = parse_top(argc, argv);
    if (o.help) return 0;
    const JobAccess access = prepare_access(o.query);
    if (!o.once && ::isatty(STDOUT_FILENO) == 0) {
      throw core::Error("the live view needs a terminal; use --once (or --format json) for a snapshot");
    }
    JobTarget t;
    auto store = connect_to(o.query, access, t);
    if (o.once) return run_once(o, t, *store);
    // The same job again: the Slurm step found, or the endpoint given.
    JobQuery again = o.query;
    if (!t.slurm_step.empty()) again.slurm_job = t.slurm_step;
    const Refind refind = [again, access](JobTarget& found) -> std::shared_ptr<store::TcpStore> {
      try {
        return connect_to(again, access, found);
      } catch (const core::Error&) {
        return nullptr;
      }
    };
    return run_live(o, t, watching_end(std::move(store)), refind);
  });
}

}  // namespace ddprun::launcher
