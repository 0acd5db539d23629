#include "output_relay.hpp"

#include <fcntl.h>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "agent/error.hpp"
#include "agent/log_paths.hpp"
#include "core/utf8.hpp"

namespace ddprun::agent {

namespace {

// The terminal line's owner: one worker's stdout or stderr.
std::size_t owner_of(std::size_t worker, bool is_err) {
  return worker * 2 + (is_err ? 1 : 0);
}

// Whether the line that ends an open line was written already, as its last redraw.
bool written(const std::string& shown, std::string_view line) {
  return !shown.empty() && line == shown;
}

// The open line written as a line of a file or pipe: without a character the read cut in two, and
// cut after kRedrawLineBytes (a line that only grows, dots say, then writes nothing more until its
// newline instead of ever longer copies of itself).
void write_redraw(LineWriter& w, std::string_view prefix, std::string& shown, std::string_view text) {
  const bool cut = text.size() > kRedrawLineBytes;
  const std::string_view whole = core::without_cut_character(text.substr(0, kRedrawLineBytes));
  if (whole.empty()) return;
  std::string line(whole);
  if (cut) line += "\u2026";  // an ellipsis
  if (line == shown) return;
  shown = line;
  w.line(prefix, line);
  w.flush();
}

}  // namespace

OutputRelay::OutputRelay(boost::asio::io_context& io, RelaySettings settings)
    : s_(std::move(settings)), timer_(io) {
  // Events are for programs: with them, no escape sequence and no line drawn over, terminal or not.
  terminal_fd_[0] = !s_.json_events && redraw_terminal(1);
  terminal_fd_[1] = !s_.json_events && redraw_terminal(2);
}

void OutputRelay::add(const core::Worker& w, const std::string& host) {
  const auto console_pace = [this](bool is_err) {
    return on_terminal(is_err) ? kTerminalRedrawInterval : s_.redraw_interval;
  };
  auto s = std::make_unique<Sink>(Stream(console_pace(false), s_.redraw_interval),
                                  Stream(console_pace(true), s_.redraw_interval));
  if (s_.prefix_on) {
    const auto role = w.env.find("ROLE_NAME");
    s->prefix =
        render_prefix(s_.prefix_template, PrefixFields{w.rank, w.local_rank, w.node_rank, host,
                                                       role != w.env.end() ? role->second : "default"});
  }
  s->console = !s_.local_ranks_filter || s_.local_ranks_filter->count(w.local_rank) > 0;
  if (s_.log_dir) open_log_files(*s, w.rank);
  sinks_.push_back(std::move(s));
}

void OutputRelay::open_log_files(Sink& s, int rank) const {
  const std::string dir = rank_log_dir(*s_.log_dir, s_.requeue, s_.attempt, rank);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("cannot create log directory " + dir + ": " + ec.message(), 1);
  for (const bool is_err : {false, true}) {
    const std::string path = dir + (is_err ? "/stderr.log" : "/stdout.log");
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw Error("cannot open log file " + path + ": " + std::strerror(errno), 1);
    (is_err ? s.err_file : s.out_file) = LineWriter(fd, true);
  }
}

void OutputRelay::line(std::size_t worker, bool is_err, std::string_view text) {
  Sink& s = *sinks_.at(worker);
  Stream& st = is_err ? s.err : s.out;
  LineWriter& file = is_err ? s.err_file : s.out_file;
  if (s.console) {
    if (on_terminal(is_err)) {
      terminal_.end(owner_of(worker, is_err));  // its own redrawn line gives way to the line itself
      terminal_.erase();                        // another's goes above it until flush()
      console(is_err).line(s.prefix, text);
    } else if (!written(st.console.shown, text)) {
      console(is_err).line(s.prefix, text);
    }
  }
  if (!written(st.file.shown, text)) file.line({}, text);
  for (Redraw* r : {&st.console, &st.file}) {
    r->pace.closed();
    r->shown.clear();
  }
  st.open.clear();
  if (is_err) s.tail.push(text);
}

void OutputRelay::flush(std::size_t worker, bool is_err) {
  Sink& s = *sinks_.at(worker);
  console(is_err).flush();
  if (on_terminal(is_err)) terminal_.restore();
  (is_err ? s.err_file : s.out_file).flush();
}

void OutputRelay::open_line(std::size_t worker, bool is_err, std::string_view text) {
  Sink& s = *sinks_.at(worker);
  Stream& st = is_err ? s.err : s.out;
  if (text.empty() || text == st.open) return;  // nothing new to show
  st.open.assign(text);
  const auto now = RedrawClock::now();
  if (s.console) st.console.pace.changed(now);
  if ((is_err ? s.err_file : s.out_file).active()) st.file.pace.changed(now);
  show_due(worker, is_err, now);
  arm_timer();
}

void OutputRelay::show_due(std::size_t worker, bool is_err, RedrawClock::time_point now) {
  Sink& s = *sinks_.at(worker);
  Stream& st = is_err ? s.err : s.out;
  if (st.console.pace.due(now)) {
    if (on_terminal(is_err)) {
      terminal_.draw(is_err ? 2 : 1, owner_of(worker, is_err), s.prefix + st.open);
    } else {
      write_redraw(console(is_err), s.prefix, st.console.shown, st.open);
    }
    st.console.pace.shown(now);
  }
  if (st.file.pace.due(now)) {
    write_redraw(is_err ? s.err_file : s.out_file, {}, st.file.shown, st.open);
    st.file.pace.shown(now);
  }
}

// One timer for every open line: it fires at the earliest deadline, shows what is due, and is set
// again for the next one.
void OutputRelay::arm_timer() {
  if (stopped_) return;
  std::optional<RedrawClock::time_point> next;
  for (const auto& s : sinks_) {
    for (const Stream* st : {&s->out, &s->err}) {
      for (const Redraw* r : {&st->console, &st->file}) {
        if (const auto d = r->pace.deadline(); d && (!next || *d < *next)) next = d;
      }
    }
  }
  if (!next || (timer_at_ && *timer_at_ <= *next)) return;
  timer_at_ = next;
  timer_.expires_at(*next);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    timer_at_.reset();
    const auto now = RedrawClock::now();
    for (std::size_t w = 0; w < sinks_.size(); ++w) {
      for (const bool is_err : {false, true}) show_due(w, is_err, now);
    }
    arm_timer();
  });
}

void OutputRelay::stop() {
  stopped_ = true;
  timer_.cancel();
}

std::vector<std::string> OutputRelay::stderr_tail(std::size_t worker) const {
  const auto t = sinks_.at(worker)->tail.lines();
  return {t.begin(), t.end()};
}

}  // namespace ddprun::agent
