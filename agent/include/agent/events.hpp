#pragma once
// ddprun's own messages for machines (--log-format json: one JSON object per line) and the colour
// rules for humans. Worker output never goes through here.
#include <mutex>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace ddprun::agent {

enum class LogFormat { text, json };

// Thread-safe sink for ddprun's own events. In json mode each emit() writes one compact JSON object
// and '\n' with a single write(2) to the fd:
//   {"time": ISO-8601 UTC with ms, "event": name, "host": ..., "node_rank": ..., ...fields}
// "host" defaults to gethostname() and "node_rank" to null until set_context(); a field of the same
// name overrides them. "time" and "event" are reserved. Invalid UTF-8 in strings (worker stderr
// lines) is replaced by U+FFFD so every line stays valid JSON. In text mode emit() does nothing.
class Events {
 public:
  explicit Events(LogFormat f = LogFormat::text, int fd = 2);
  bool json() const { return format_ == LogFormat::json; }
  void set_context(std::string host, int node_rank);
  void emit(const std::string& event, const nlohmann::json& fields = nlohmann::json::object());
  // A warning for the user: a "warning" event in json mode, else "ddprun: warning: ..." on the fd.
  void warn(const std::string& message);

 private:
  LogFormat format_;
  int fd_;
  std::mutex m_;
  std::string host_;
  int node_rank_ = -1;  // -1: not known yet, written as null
};

// The line emit() writes (without the trailing '\n'); pure, for tests and for callers that batch.
std::string format_event(const std::string& time, const std::string& event, const std::string& host,
                         int node_rank, const nlohmann::json& fields);

// Colour for text output: on only when the fd is a TTY, TERM is set and not "dumb", and NO_COLOR is
// unset or empty (https://no-color.org).
bool use_colour(int fd);
bool colour_wanted(bool is_tty, const char* term, const char* no_color);  // the decision, pure

enum class Style { bold_red, red, green, yellow, bold };
// `text` wrapped in the style's ANSI codes when `on`, else `text` unchanged.
std::string paint(std::string_view text, Style s, bool on);

}  // namespace ddprun::agent
