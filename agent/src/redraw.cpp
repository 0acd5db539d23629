#include "redraw.hpp"

#include <sys/ioctl.h>
#include <unistd.h>
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "agent/io.hpp"
#include "core/utf8.hpp"

namespace ddprun::agent {

namespace {

constexpr std::string_view kEraseLine = "\r\x1b[K";  // to the line's start, then clear it

int terminal_columns(int fd) {
  winsize ws{};
  if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

// The end of the escape sequence (ESC [ parameters, intermediates, final byte) starting at `i`.
std::size_t escape_end(std::string_view s, std::size_t i) {
  std::size_t j = i + 2;
  while (j < s.size() && !(s[j] >= 0x40 && s[j] <= 0x7E)) ++j;
  return std::min(j + 1, s.size());
}

}  // namespace

void RedrawPace::changed(RedrawClock::time_point now) {
  if (!open_) {
    open_ = true;
    due_ = now + interval_;
    if (last_shown_) due_ = std::max(due_, *last_shown_ + interval_);
  }
  dirty_ = true;
}

void RedrawPace::shown(RedrawClock::time_point now) {
  last_shown_ = now;
  due_ = now + interval_;
  dirty_ = false;
}

void RedrawPace::closed() {
  open_ = false;
  dirty_ = false;
}

std::optional<RedrawClock::time_point> RedrawPace::deadline() const {
  if (!dirty_) return std::nullopt;
  return due_;
}

std::string fit_terminal_width(std::string_view text, int columns) {
  const int limit = std::max(columns - 1, 1);
  std::string out;
  int used = 0;
  bool escapes = false;
  for (std::size_t i = 0; i < text.size();) {
    if (text[i] == '\x1b' && i + 1 < text.size() && text[i + 1] == '[') {
      const std::size_t end = escape_end(text, i);
      out.append(text.substr(i, end - i));
      escapes = true;
      i = end;
      continue;
    }
    if (used == limit) break;
    const std::size_t n = std::max<std::size_t>(core::utf8_length(text, i), 1);
    out.append(text.substr(i, n));
    ++used;
    i += n;
  }
  if (escapes) out += "\x1b[0m";
  return out;
}

bool redraw_terminal_wanted(bool is_tty, const char* term) {
  return is_tty && term != nullptr && term[0] != '\0' && std::strcmp(term, "dumb") != 0;
}

bool redraw_terminal(int fd) {
  return redraw_terminal_wanted(::isatty(fd) == 1, std::getenv("TERM"));
}

void TerminalLine::draw(int fd, std::size_t owner, std::string_view text) {
  if (fd_ >= 0 && fd_ != fd && !erased_) write_all(fd_, kEraseLine);
  fd_ = fd;
  owner_ = owner;
  text_ = fit_terminal_width(text, terminal_columns(fd));
  erased_ = false;
  write_all(fd_, std::string(kEraseLine) + text_);
}

void TerminalLine::end(std::size_t owner) {
  if (fd_ < 0 || owner_ != owner) return;
  if (!erased_) write_all(fd_, kEraseLine);
  fd_ = -1;
  text_.clear();
  erased_ = false;
}

void TerminalLine::erase() {
  if (fd_ < 0 || erased_) return;
  write_all(fd_, kEraseLine);
  erased_ = true;
}

void TerminalLine::restore() {
  if (fd_ < 0 || !erased_) return;
  write_all(fd_, text_);
  erased_ = false;
}

}  // namespace ddprun::agent
