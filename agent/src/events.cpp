#include "agent/events.hpp"

#include "agent/io.hpp"
#include "core/json.hpp"

#include <unistd.h>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "report.hpp"

namespace ddprun::agent {

Events::Events(LogFormat f, int fd) : format_(f), fd_(fd), host_(local_hostname()) {}

void Events::set_context(std::string host, int node_rank) {
  std::lock_guard lk(m_);
  host_ = std::move(host);
  node_rank_ = node_rank;
}

std::string format_event(const std::string& time, const std::string& event, const std::string& host,
                         int node_rank, const nlohmann::json& fields) {
  // Written by hand so that time and event come first, which makes the stream easy to read and grep.
  std::string out = "{\"time\":" + core::dump_json(time) + ",\"event\":" + core::dump_json(event);
  const bool obj = fields.is_object();
  out += ",\"host\":" +
         (obj && fields.contains("host") ? core::dump_json(fields.at("host")) : core::dump_json(host));
  if (obj && fields.contains("node_rank")) {
    out += ",\"node_rank\":" + core::dump_json(fields.at("node_rank"));
  } else {
    out += ",\"node_rank\":" + (node_rank >= 0 ? std::to_string(node_rank) : std::string("null"));
  }
  if (obj) {
    for (const auto& [k, v] : fields.items()) {
      if (k == "time" || k == "event" || k == "host" || k == "node_rank") continue;
      // Appended piece by piece: `"," + string` trips GCC 12's -Wrestrict false positive at -O3.
      out += ',';
      out += core::dump_json(k);
      out += ':';
      out += core::dump_json(v);
    }
  } else if (!fields.is_null()) {
    out += ",\"data\":" + core::dump_json(fields);
  }
  out += "}";
  return out;
}

void Events::warn(const std::string& message) {
  if (json()) {
    emit("warning", {{"message", message}});
    return;
  }
  const std::string line =
      "ddprun: " + paint("warning:", Style::yellow, use_colour(fd_)) + " " + message + "\n";
  std::lock_guard lk(m_);
  write_all(fd_, line);
}

void Events::emit(const std::string& event, const nlohmann::json& fields) {
  if (!json()) return;
  const std::string now = format_time(core::failure_now());
  std::lock_guard lk(m_);
  const std::string line = format_event(now, event, host_, node_rank_, fields) + "\n";
  // One write(2) so lines from several threads or processes do not interleave; a broken events
  // fd has nowhere to report itself.
  write_all(fd_, line);
}

bool colour_wanted(bool is_tty, const char* term, const char* no_color) {
  if (!is_tty) return false;
  if (no_color != nullptr && no_color[0] != '\0') return false;
  if (term == nullptr || term[0] == '\0' || std::strcmp(term, "dumb") == 0) return false;
  return true;
}

bool use_colour(int fd) {
  return colour_wanted(::isatty(fd) == 1, std::getenv("TERM"), std::getenv("NO_COLOR"));
}

std::string paint(std::string_view text, Style s, bool on) {
  if (!on) return std::string(text);
  const char* code = "";
  switch (s) {
    case Style::bold_red:
      code = "\x1b[1;31m";
      break;
    case Style::red:
      code = "\x1b[31m";
      break;
    case Style::green:
      code = "\x1b[32m";
      break;
    case Style::yellow:
      code = "\x1b[33m";
      break;
    case Style::bold:
      code = "\x1b[1m";
      break;
  }
  return code + std::string(text) + "\x1b[0m";
}

}  // namespace ddprun::agent
