#include "agent/python_error.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "agent/error.hpp"
#include "agent/log_paths.hpp"
#include "core/failure.hpp"

namespace ddprun::agent {

namespace {

// The longest prefix of `s` within `n` bytes that does not split a UTF-8 sequence.
std::string utf8_head(const std::string& s, std::size_t n) {
  if (s.size() <= n) return s;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n);
}

// The shortest suffix of `s` within `n` bytes that starts on a UTF-8 sequence.
std::string utf8_tail(const std::string& s, std::size_t n) {
  if (s.size() <= n) return s;
  std::size_t from = s.size() - n;
  while (from < s.size() && (static_cast<unsigned char>(s[from]) & 0xC0) == 0x80) ++from;
  return s.substr(from);
}

// The message keeps its start and the traceback its end (the frame that raised), within the cap.
PythonError capped(PythonError e) {
  constexpr std::size_t cap = core::kPythonErrorCap;
  if (e.message.size() + e.traceback.size() <= cap) return e;
  const std::string cut_msg = " [message cut by ddprun]";
  if (e.message.size() > cap / 2) e.message = utf8_head(e.message, cap / 2 - cut_msg.size()) + cut_msg;
  const std::size_t room = cap - e.message.size();
  const std::string note = "[traceback cut by ddprun to its last lines; the whole error file was bigger]\n";
  if (e.traceback.size() > room) {
    std::string tail = utf8_tail(e.traceback, room > note.size() ? room - note.size() : 0);
    const auto nl = tail.find('\n');  // start at a whole line
    if (nl != std::string::npos && nl + 1 < tail.size()) tail.erase(0, nl + 1);
    e.traceback = note + tail;
  }
  return e;
}

}  // namespace

std::optional<PythonError> parse_python_error(std::string_view text) {
  // Parse failures (bad JSON, bad UTF-8) come back as discarded values; no exception is used.
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  const auto m = j.find("message");
  if (m == j.end()) return std::nullopt;
  PythonError e;
  if (m->is_string()) {
    e.message = m->get<std::string>();  // the older form
  } else if (m->is_object()) {
    const auto inner = m->find("message");
    if (inner == m->end() || !inner->is_string()) return std::nullopt;
    e.message = inner->get<std::string>();
    const auto extra = m->find("extraInfo");
    if (extra != m->end() && extra->is_object()) {
      const auto tb = extra->find("py_callstack");
      if (tb != extra->end() && tb->is_string()) e.traceback = tb->get<std::string>();
    }
  } else {
    return std::nullopt;
  }
  if (e.message.empty() && e.traceback.empty()) return std::nullopt;
  return capped(std::move(e));
}

std::optional<PythonError> read_python_error(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return std::nullopt;
  std::string text;
  char buf[65536];
  bool too_big = false;
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > kErrorFileReadCap) {
      too_big = true;
      break;
    }
  }
  ::close(fd);
  if (too_big) return std::nullopt;
  return parse_python_error(text);
}

ErrorFiles::ErrorFiles(const std::optional<std::string>& log_dir, int requeue, int attempt)
    : log_dir_(log_dir), requeue_(requeue), attempt_(attempt) {
  if (log_dir_) return;
  if (!temp_dir_.make(kErrorFilesDir)) {
    throw Error(fmt::format("cannot create a directory for the workers' error files in {}: {} (set TMPDIR)",
                            PrivateDir::parent(), std::strerror(errno)),
                1);
  }
}

std::string ErrorFiles::prepare(int rank) const {
  std::string path = worker_error_file(log_dir_, requeue_, attempt_, rank, temp_dir_.path());
  ::unlink(path.c_str());  // a file from an earlier run must not be taken for this one's
  return path;
}

std::unique_ptr<ErrorFiles> open_error_files(const std::optional<std::string>& log_dir, int requeue,
                                             int attempt,
                                             const std::function<void(const std::string&)>& warn) {
  try {
    return std::make_unique<ErrorFiles>(log_dir, requeue, attempt);
  } catch (const Error& e) {
    warn(fmt::format("{}; Python tracebacks will not be in the report", e.what()));
    return nullptr;
  }
}

}  // namespace ddprun::agent
