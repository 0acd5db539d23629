#include "core/failure.hpp"

#include <charconv>
#include <csignal>
#include <cstring>
#include <ctime>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/json.hpp"
#include "core/utf8.hpp"

namespace ddprun::core {

FailureTime failure_now() {
  return std::chrono::floor<std::chrono::microseconds>(std::chrono::system_clock::now());
}

bool ends_job(const Failure& root) {
  return root.fatal || (root.rank < 0 && root.signal != 0) || root.after_signal != 0;
}

namespace {

// The names glibc's sigabbrev_np gives, by this architecture's numbers. A table of our own: sigabbrev_np is
// glibc 2.32's, newer than the portable build's 2.28 (docs/architecture.md, "The portable build").
struct SignalName {
  int sig;
  const char* name;
};
constexpr SignalName kSignalNames[] = {
    {SIGHUP, "HUP"},       {SIGINT, "INT"},     {SIGQUIT, "QUIT"}, {SIGILL, "ILL"},   {SIGTRAP, "TRAP"},
    {SIGABRT, "ABRT"},     {SIGBUS, "BUS"},     {SIGFPE, "FPE"},   {SIGKILL, "KILL"}, {SIGUSR1, "USR1"},
    {SIGSEGV, "SEGV"},     {SIGUSR2, "USR2"},   {SIGPIPE, "PIPE"}, {SIGALRM, "ALRM"}, {SIGTERM, "TERM"},
#ifdef SIGSTKFLT
    {SIGSTKFLT, "STKFLT"},
#endif
    {SIGCHLD, "CHLD"},     {SIGCONT, "CONT"},   {SIGSTOP, "STOP"}, {SIGTSTP, "TSTP"}, {SIGTTIN, "TTIN"},
    {SIGTTOU, "TTOU"},     {SIGURG, "URG"},     {SIGXCPU, "XCPU"}, {SIGXFSZ, "XFSZ"}, {SIGVTALRM, "VTALRM"},
    {SIGPROF, "PROF"},     {SIGWINCH, "WINCH"}, {SIGPOLL, "POLL"},
#ifdef SIGPWR
    {SIGPWR, "PWR"},
#endif
    {SIGSYS, "SYS"},
};

}  // namespace

std::string signal_name(int sig) {
  for (const auto& [number, name] : kSignalNames) {
    if (number == sig) return std::string("SIG") + name;
  }
  return "signal " + std::to_string(sig);
}

std::string format_time(FailureTime t) {
  using namespace std::chrono;
  const auto ms = duration_cast<milliseconds>(t.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:03d}Z", buf, static_cast<int>(ms % 1000));
}

nlohmann::json failure_to_json(const Failure& f) {
  nlohmann::json j;
  j["host"] = f.host;
  j["node_rank"] = f.node_rank;
  j["rank"] = f.rank;
  j["local_rank"] = f.local_rank;
  j["exit_code"] = f.exit_code;
  j["signal"] = f.signal;
  j["signal_name"] = f.signal != 0 ? nlohmann::json(signal_name(f.signal)) : nlohmann::json(nullptr);
  j["pid"] = f.pid;
  j["reason"] = f.reason;
  j["time"] = format_time(f.time);
  j["timestamp_us"] = f.time.time_since_epoch().count();
  j["stderr_tail"] = f.stderr_tail;
  j["fatal"] = f.fatal;
  j["after_signal"] = f.after_signal;
  j["hang"] = f.hang;
  j["lost"] = f.lost;
  nlohmann::json silent = nlohmann::json::array();
  for (const auto& s : f.silent) silent.push_back({{"rank", s.rank}, {"silent_s", s.silent_s}});
  j["silent"] = std::move(silent);
  j["error_message"] = f.error_message.empty() ? nlohmann::json(nullptr) : nlohmann::json(f.error_message);
  j["traceback"] = f.traceback.empty() ? nlohmann::json(nullptr) : nlohmann::json(f.traceback);
  j["step"] = f.step ? nlohmann::json(*f.step) : nlohmann::json(nullptr);
  return j;
}

namespace {

// A string field that older records lack and that is null when empty.
std::string optional_string(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  return it->get<std::string>();
}

}  // namespace

Failure failure_from_json(const nlohmann::json& j) {
  try {
    Failure f;
    f.host = j.at("host").get<std::string>();
    f.node_rank = json_int<int>(j, "node_rank");
    f.rank = json_int<int>(j, "rank");
    f.local_rank = json_int<int>(j, "local_rank");
    f.exit_code = json_int<int>(j, "exit_code");
    f.signal = json_int<int>(j, "signal");
    f.pid = json_int<long>(j, "pid");
    f.reason = j.at("reason").get<std::string>();
    f.time = FailureTime(std::chrono::microseconds(json_int<long long>(j, "timestamp_us")));
    f.stderr_tail = j.value("stderr_tail", std::vector<std::string>{});
    f.fatal = j.value("fatal", false);
    f.after_signal = json_int_or(j, "after_signal", 0);
    f.hang = j.value("hang", false);
    f.lost = j.value("lost", false);
    // Absent in records from older agents; when present, every entry must be well formed.
    for (const auto& s : j.value("silent", nlohmann::json::array())) {
      f.silent.push_back({json_int<int>(s, "rank"), s.at("silent_s").get<double>()});
    }
    f.error_message = optional_string(j, "error_message");
    f.traceback = optional_string(j, "traceback");
    // Absent in records from older agents, null when no rank reported a step.
    if (const auto it = j.find("step"); it != j.end() && !it->is_null()) f.step = json_int<std::int64_t>(*it);
    return f;
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("malformed failure record from another node: ") + e.what(), 1);
  }
}

// JSON strings hold UTF-8 only, and the report shows a worker's other bytes as \xNN: the wire form
// also carries each stderr line that is not UTF-8 as hex ("stderr_tail_hex": {index: hex}), beside
// the replaced text that agents without it read.
std::string encode_failure(const Failure& f) {
  nlohmann::json j = failure_to_json(f);
  nlohmann::json raw = nlohmann::json::object();
  for (std::size_t i = 0; i < f.stderr_tail.size(); ++i) {
    if (!valid_utf8(f.stderr_tail[i])) raw[std::to_string(i)] = to_hex(f.stderr_tail[i]);
  }
  if (!raw.empty()) j["stderr_tail_hex"] = std::move(raw);
  return dump_json(j);
}

namespace {

void restore_stderr_bytes(const nlohmann::json& j, Failure& f) {
  const auto it = j.find("stderr_tail_hex");
  if (it == j.end()) return;
  for (const auto& [key, hex] : it->items()) {
    std::size_t i = 0;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), i);
    std::string bytes;
    if (ec != std::errc{} || end != key.data() + key.size() || i >= f.stderr_tail.size() ||
        !from_hex(hex.get<std::string>(), bytes)) {
      throw Error("malformed failure record from another node: a bad stderr_tail_hex entry " + key, 1);
    }
    f.stderr_tail[i] = std::move(bytes);
  }
}

}  // namespace

Failure decode_failure(std::string_view text) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    Failure f = failure_from_json(j);
    restore_stderr_bytes(j, f);
    return f;
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("malformed failure record from another node: ") + e.what(), 1);
  }
}

}  // namespace ddprun::core
