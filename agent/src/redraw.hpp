#pragma once
// A line that a worker redraws in place (a progress bar: carriage returns; or dots with no newline
// yet) on its way to the console and the log files. RedrawPace (pure) says when it is shown again;
// TerminalLine draws it in place on a terminal, with whole lines going above it, as tqdm does. A file
// or pipe gets it as an ordinary line instead, at most once per its interval.
#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace ddprun::agent {

using RedrawClock = std::chrono::steady_clock;

// How often a redrawn line is drawn again on a terminal: what the eye can follow. A file or pipe gets
// it as a line at most every AgentOptions::redraw_interval, so that a bar redrawn ten times a second
// does not flood a log.
inline constexpr std::chrono::milliseconds kTerminalRedrawInterval{100};
// A redrawn line written to a file or pipe is cut after this many bytes (a bar fits; the line's
// final text, once its newline comes, is written whole).
inline constexpr std::size_t kRedrawLineBytes = 512;

// The pace of one open line (one worker's stdout or stderr, to one destination).
class RedrawPace {
 public:
  explicit RedrawPace(std::chrono::milliseconds interval) : interval_(interval) {}

  // The open line changed at `now` (it opened, or its latest redraw came).
  void changed(RedrawClock::time_point now);
  // Show it now: it changed since it was last shown, it has been open for an interval (a line that
  // a program writes in pieces is not shown in halves) and the last showing is an interval ago.
  bool due(RedrawClock::time_point now) const { return dirty_ && now >= due_; }
  void shown(RedrawClock::time_point now);
  // Its newline came (or its stream ended).
  void closed();
  // When due() turns true if nothing else happens; nullopt: nothing to show.
  std::optional<RedrawClock::time_point> deadline() const;

 private:
  std::chrono::milliseconds interval_;
  bool open_ = false;
  bool dirty_ = false;
  RedrawClock::time_point due_{};
  std::optional<RedrawClock::time_point> last_shown_;
};

// `text` cut to fit `columns` - 1 columns of a terminal (one column a character; escape sequences
// (ESC [ ... final byte) take none), so that a carriage return still reaches its start; with an
// attribute reset after it when it held escape sequences.
std::string fit_terminal_width(std::string_view text, int columns);

// Whether `fd` is a terminal that understands "erase the line" (TERM set and not "dumb").
bool redraw_terminal(int fd);
bool redraw_terminal_wanted(bool is_tty, const char* term);  // the decision, pure

// The one line of the console's terminal that an open line is drawn on. Whoever writes whole lines
// to the terminal calls erase() before and restore() after, so they go above it.
class TerminalLine {
 public:
  // Draws `text` (the prefix and the open line) on `fd` in place of what was drawn; `owner` names
  // the worker's stream it comes from.
  void draw(int fd, std::size_t owner, std::string_view text);
  // The owner's line was ended by its newline: erase what it drew, draw nothing until the next draw.
  void end(std::size_t owner);
  void erase();    // before whole lines
  void restore();  // after them: what was drawn, again
  bool drawn() const { return fd_ >= 0; }

 private:
  int fd_ = -1;  // where the line is drawn; -1: nothing drawn
  std::size_t owner_ = 0;
  std::string text_;  // as drawn (fitted)
  bool erased_ = false;
};

}  // namespace ddprun::agent
