#pragma once
// Worker output to the agent's stdout and stderr (prefixed, filtered by local rank) and to the
// per-rank log files; keeps each worker's last stderr lines for the failure report. A line still
// open (a progress bar redrawn with carriage returns, dots with no newline yet) is shown as it goes:
// drawn in place on a terminal, written as a line at most once per redraw interval to a file or
// pipe (redraw.hpp), on a timer of the relay's own when no more output comes.
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/plan.hpp"
#include "log_relay.hpp"
#include "redraw.hpp"
#include "run_settings.hpp"

namespace ddprun::agent {

class OutputRelay {
 public:
  OutputRelay(boost::asio::io_context& io, RelaySettings settings);

  // The next worker's prefix, console filter and log files. Throws Error (exit 1) when its log
  // directory or files cannot be created.
  void add(const core::Worker& w, const std::string& host);

  // `worker` is the order of add(). A complete line, which ends the stream's open line. Lines are
  // buffered until flush(), which the supervisor calls after each read, so one write(2) carries
  // whole lines.
  void line(std::size_t worker, bool is_err, std::string_view text);
  void flush(std::size_t worker, bool is_err);
  // After a read and its flush: the stream's open line now (LineSplitter::open_line; "" for none).
  void open_line(std::size_t worker, bool is_err, std::string_view text);
  // A redrawn line on the terminal goes away before a message of the agent's own.
  void interrupt_terminal() { terminal_.erase(); }
  // The loop is over: no more redraws.
  void stop();
  std::vector<std::string> stderr_tail(std::size_t worker) const;

 private:
  // One destination of a stream's open line: its pace, and in a file or pipe the text last written
  // as a line (so the final line is not written twice).
  struct Redraw {
    explicit Redraw(std::chrono::milliseconds interval) : pace(interval) {}
    RedrawPace pace;
    std::string shown;
  };
  struct Stream {
    Stream(std::chrono::milliseconds to_console, std::chrono::milliseconds to_file)
        : console(to_console), file(to_file) {}
    std::string open;  // the open line's latest text
    Redraw console;
    Redraw file;
  };
  struct Sink {
    Sink(const Stream& out_stream, const Stream& err_stream) : out(out_stream), err(err_stream) {}
    std::string prefix;
    bool console = true;
    LineWriter out_file;
    LineWriter err_file;
    TailBuffer tail{20};
    Stream out;
    Stream err;
  };

  void open_log_files(Sink& s, int rank) const;
  LineWriter& console(bool is_err) { return is_err ? err_console_ : out_console_; }
  bool on_terminal(bool is_err) const { return terminal_fd_[is_err ? 1 : 0]; }
  void show_due(std::size_t worker, bool is_err, RedrawClock::time_point now);
  void arm_timer();

  RelaySettings s_;
  LineWriter out_console_{1};
  LineWriter err_console_{2};
  bool terminal_fd_[2] = {false, false};  // stdout, stderr: a terminal to redraw on
  TerminalLine terminal_;
  std::vector<std::unique_ptr<Sink>> sinks_;
  boost::asio::steady_timer timer_;
  std::optional<RedrawClock::time_point> timer_at_;
  bool stopped_ = false;
};

}  // namespace ddprun::agent
