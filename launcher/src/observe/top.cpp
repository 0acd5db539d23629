#include "launcher/observe/top.hpp"

#include <poll.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/json.hpp"
#include "launcher/observe/job_locator.hpp"
#include "launcher/observe/top_view.hpp"
#include "launcher/system.hpp"
#include "store/client.hpp"

namespace ddprun::launcher {

namespace {

// Every connect and read of `top` is bounded by this: a stopped node 0 is one line, not a wait.
constexpr std::chrono::milliseconds kObserveTimeout{3000};
constexpr int kRefreshMs = 1000;

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
    std::cout << core::dump_json(top_json(nodes, fmt::format("{}:{}", t.host, t.port), t.run_id, now))
              << "\n";
  } else {
    std::cout << top_text(nodes, t.describe(), now, o.by_node);
  }
  std::cout.flush();
  return 0;
}

// Draws every second until q, Ctrl-C or a stopping signal; n toggles per node / per rank.
int run_live(const TopOptions& o, const JobTarget& t, store::TcpStore& store) {
  StopSignals signals;
  TerminalSession term;
  bool by_node = o.by_node;
  g_stop_signal = 0;
  for (;;) {
    const auto nodes = read_job_status(store, t);  // throws: the terminal is restored on the way out
    const auto [cols, rows] = terminal_size();
    std::string frame = "\x1b[H";
    const std::string text = top_text(nodes, t.describe(), unix_ms_now(), by_node, cols, rows, true);
    std::size_t start = 0;
    while (start < text.size()) {
      const auto nl = text.find('\n', start);
      frame += text.substr(start, nl - start) + "\x1b[K";
      start = nl + 1;
      if (start < text.size()) frame += "\n";  // the terminal's output processing adds the \r
    }
    frame += "\x1b[J";
    write_all_out(frame);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kRefreshMs);
    for (;;) {
      if (g_stop_signal != 0) return 0;
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{STDIN_FILENO, POLLIN, 0};
      const int r = ::poll(&p, 1, static_cast<int>(left.count()));
      if (r < 0) {
        if (errno == EINTR) {
          if (g_stop_signal != 0) return 0;
          break;  // a resize: redraw now
        }
        return 0;
      }
      if (r == 0) break;
      char c = 0;
      const ssize_t n = ::read(STDIN_FILENO, &c, 1);
      if (n == 0 || (p.revents & (POLLHUP | POLLERR)) != 0) return 0;  // the terminal went away
      if (n < 0) continue;
      if (c == 'q' || c == 'Q' || c == 3) return 0;  // 3: Ctrl-C (ISIG is off)
      if (c == 'n' || c == 'N' || c == '\t') {
        by_node = !by_node;
        break;
      }
    }
  }
}

TopOptions parse_top(int argc, const char* const* argv) {
  TopOptions o;
  CLI::App app{
      "Show a running ddprun job's ranks: pid, state, last output line, seconds since progress, RSS, "
      "CPU%; live like top (q or Ctrl-C quits, n toggles per node / per rank), or once.",
      "ddprun top"};
  app.set_help_flag("-h,--help", "Print this help and exit");
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", o.query.rdzv_endpoint,
                 "The job's store, HOST:PORT, as the job was started with")
      ->envname("DDPRUN_RDZV_ENDPOINT");
  app.add_option("--rdzv-id,--rdzv_id", o.query.rdzv_id, "The job's --rdzv-id")->envname("DDPRUN_RDZV_ID");
  app.add_option("--rdzv-auth", o.query.rdzv_auth, "As the job's agents: auto, munge, token or none")
      ->check(CLI::IsMember({"auto", "munge", "token", "none"}))
      ->envname("DDPRUN_RDZV_AUTH");
  app.add_option("--rdzv-token-file", o.query.rdzv_token_file,
                 "File holding the job's shared secret (else DDPRUN_TOKEN)")
      ->envname("DDPRUN_RDZV_TOKEN_FILE");
  app.add_option(
      "--job", o.query.slurm_job,
      "A Slurm job (JOBID or JOBID.STEPID) instead of --rdzv-endpoint; default inside an allocation: "
      "SLURM_JOB_ID");
  app.add_option("--step", o.query.slurm_step, "With --job: the step (default: the newest ddprun step)");
  app.add_flag("--once", o.once, "Print one snapshot and exit");
  app.add_option("--format", o.format, "text or json (json prints one snapshot)")
      ->check(CLI::IsMember({"text", "json"}));
  app.add_flag("--nodes", o.by_node, "One line per node instead of per rank");
  std::vector<const char*> args(argv + 1, argv + argc);  // "top" stands for the program's name
  try {
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    o.help = true;
  } catch (const CLI::ParseError& e) {
    throw core::Error(fmt::format("{}; see ddprun top --help", e.what()));
  }
  if (o.format == "json") o.once = true;
  return o;
}

}  // namespace

int top_main(int argc, const char* const* argv) {
  try {
    const TopOptions o = parse_top(argc, argv);
    if (o.help) return 0;
    const auto env = snapshot_environ();
    const bool slurm = !o.query.rdzv_endpoint && (o.query.slurm_job || env.count("SLURM_JOB_ID") != 0);
    JobTarget t;
    if (!slurm) t = locate_job(o.query);
    const auto auth = observer_auth(o.query, env);
    if (!o.once && ::isatty(STDOUT_FILENO) == 0) {
      throw core::Error("the live view needs a terminal; use --once (or --format json) for a snapshot");
    }
    const auto store = slurm ? connect_slurm_job(o.query, env, auth, t, kObserveTimeout)
                             : connect_job(t, auth, kObserveTimeout);
    return o.once ? run_once(o, t, *store) : run_live(o, t, *store);
  } catch (const core::Error& e) {
    fmt::print(stderr, "ddprun top: error: {}\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    fmt::print(stderr, "ddprun top: error: {}\n", e.what());
    return kObserveExit;
  }
}

}  // namespace ddprun::launcher
