#pragma once
// Log relay: worker output split into whole lines, prefixed, and written with one write(2) per
// batch of whole lines, so output of different workers never interleaves inside a line.
#include <cstddef>
#include <deque>
#include <string>
#include <string_view>

#include "core/status.hpp"

namespace ddprun::agent {

// Splits a byte stream into lines as a terminal shows them. Pure; the supervisor feeds it whatever
// read() returned. A carriage return starts the line over (a progress bar redraws itself so): a line
// is the text after its last one (core::visible_part), and the open line keeps only its latest
// redraw, so a bar that never writes a newline holds one redraw, not its history.
class LineSplitter {
 public:
  // Lines longer than max_line are cut into pieces of max_line bytes so a worker that never writes
  // a newline cannot make the agent buffer without bound.
  explicit LineSplitter(std::size_t max_line = 64 * 1024) : max_line_(max_line) {}

  // Calls on_line(std::string_view) for every complete line in pending + data, without the '\n'.
  template <class F>
  void feed(std::string_view data, F&& on_line) {
    while (!data.empty()) {
      const auto nl = data.find('\n');
      const std::string_view part = data.substr(0, nl);
      if (nl == std::string_view::npos) {
        append_open(part, on_line);
        return;
      }
      if (pending_.empty()) {
        emit(core::visible_part(part), on_line);  // common case: no copy
      } else {
        pending_.append(part);
        emit(core::visible_part(pending_), on_line);
        pending_.clear();
      }
      data.remove_prefix(nl + 1);
    }
  }

  // End of stream: a last line without '\n' is still a line (unless nothing of it shows).
  template <class F>
  void finish(F&& on_line) {
    const std::string_view last = core::visible_part(pending_);
    if (!last.empty()) emit(last, on_line);
    pending_.clear();
  }

  // The open line (no newline yet) as a terminal shows it now; "" when none.
  std::string_view open_line() const { return core::visible_part(pending_); }
  std::size_t pending_size() const { return pending_.size(); }

 private:
  template <class F>
  void emit(std::string_view line, F& on_line) {
    while (line.size() > max_line_) {
      on_line(line.substr(0, max_line_));
      line.remove_prefix(max_line_);
    }
    on_line(line);
  }

  template <class F>
  void append_open(std::string_view part, F& on_line) {
    pending_.append(part);
    // What a carriage return has since overwritten never shows again.
    const std::string_view shown = core::visible_part(pending_);
    if (const auto start = static_cast<std::size_t>(shown.data() - pending_.data()); start > 0) {
      pending_.erase(0, start);
    }
    while (pending_.size() > max_line_) {
      on_line(std::string_view(pending_).substr(0, max_line_));
      pending_.erase(0, max_line_);
    }
  }

  std::size_t max_line_;
  std::string pending_;
};

// Values for the prefix placeholders {rank} {local_rank} {node_rank} {host} {role}.
struct PrefixFields {
  int rank = 0;
  int local_rank = 0;
  int node_rank = 0;
  std::string host;
  std::string role = "default";
};

inline constexpr std::string_view kDefaultPrefixTemplate = "[{rank}]: ";

// Renders a prefix template. Throws agent::Error naming the bad placeholder; "{{" and "}}" are
// literal braces.
std::string render_prefix(std::string_view tmpl, const PrefixFields& f);

// Keeps the last `capacity` lines (for the failure report).
class TailBuffer {
 public:
  explicit TailBuffer(std::size_t capacity = 20) : capacity_(capacity) {}
  void push(std::string_view line);
  std::deque<std::string> lines() const { return lines_; }

 private:
  std::size_t capacity_;
  std::deque<std::string> lines_;
};

// Writes whole lines to a file descriptor. Lines are batched up to the pipe-atomic size and each
// batch goes out in one write(2) (looping only on short writes), so concurrent writers to the same
// pipe (several agents of one srun step) never split a line of ours. A closed reader (EPIPE) turns
// the writer off instead of killing the agent.
class LineWriter {
 public:
  LineWriter() = default;
  explicit LineWriter(int fd, bool owns_fd = false) : fd_(fd), owns_(owns_fd) {}
  LineWriter(const LineWriter&) = delete;
  LineWriter& operator=(const LineWriter&) = delete;
  LineWriter(LineWriter&& o) noexcept;
  LineWriter& operator=(LineWriter&& o) noexcept;
  ~LineWriter();

  void line(std::string_view prefix, std::string_view text);  // appends '\n'
  void flush();
  bool active() const { return fd_ >= 0 && !broken_; }

 private:
  void write_all(std::string_view data);
  int fd_ = -1;
  bool owns_ = false;
  bool broken_ = false;
  std::string buf_;
};

}  // namespace ddprun::agent
