#include "agent/heartbeat_step.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <algorithm>
#include <limits>

namespace ddprun::agent {

namespace {

bool blank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

std::optional<Step> parse_heartbeat_step(std::string_view text) {
  std::string_view s = trim(text);
  constexpr std::string_view kWord = "step";
  if (s.substr(0, kWord.size()) == kWord) {
    s.remove_prefix(kWord.size());
    // "step" and the number are two words: "step1200" is not a step.
    if (s.empty() || !blank(s.front())) return std::nullopt;
    s = trim(s);
  }
  if (s.empty()) return std::nullopt;
  Step v = 0;
  for (const char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    const int d = c - '0';
    if (v > (std::numeric_limits<Step>::max() - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

std::optional<Step> read_heartbeat_step(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return std::nullopt;
  char buf[kHeartbeatReadCap + 1];
  std::size_t n = 0;
  while (n < sizeof(buf)) {
    const ssize_t got = ::read(fd, buf + n, sizeof(buf) - n);
    if (got <= 0) break;  // EOF, or an error: what was read decides
    n += static_cast<std::size_t>(got);
  }
  ::close(fd);
  if (n > kHeartbeatReadCap) return std::nullopt;
  return parse_heartbeat_step(std::string_view(buf, n));
}

std::optional<Step> best_heartbeat_step(const std::vector<std::string>& paths) {
  std::optional<Step> best;
  for (const auto& p : paths) {
    const auto s = read_heartbeat_step(p);
    if (s && (!best || *s > *best)) best = s;
  }
  return best;
}

}  // namespace ddprun::agent
