#include "agent/hang_watch.hpp"

#include <sys/stat.h>
#include <algorithm>
#include <filesystem>
#include <string_view>

#include <fmt/format.h>

namespace ddprun::agent {

std::vector<HungRank> hung_ranks(SteadyTime now, const std::vector<RankProgress>& progress,
                                 std::chrono::milliseconds timeout) {
  std::vector<HungRank> out;
  for (const auto& p : progress) {
    if (p.exited) continue;
    const auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(now - p.last);
    if (silent >= timeout) out.push_back({p.worker, p.rank, silent});
  }
  std::sort(out.begin(), out.end(), [](const HungRank& a, const HungRank& b) {
    return a.silent != b.silent ? a.silent > b.silent : a.rank < b.rank;
  });
  return out;
}

std::chrono::milliseconds hang_poll_interval(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 4, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
}

bool python_worker(const CommandSpec& spec) {
  if (core::runs_under_python(spec)) return true;
  if (spec.command.empty()) return false;
  const std::string name = std::filesystem::path(spec.command.front()).filename().string();
  return name.rfind("python", 0) == 0;
}

PythonFlags python_flags(const std::vector<std::string>& argv) {
  PythonFlags f;
  const auto take_x = [&f](std::string_view x) {
    if (x == "faulthandler" || x.rfind("faulthandler=", 0) == 0) f.faulthandler = true;
  };
  for (std::size_t i = 1; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "--" || a.size() < 2 || a[0] != '-') return f;  // the script, or - (stdin)
    if (a[1] == '-') {
      if (a == "--check-hash-based-pycs") ++i;  // its value
      continue;
    }
    // Short options, grouped as Python allows (-IuX faulthandler, -Xfaulthandler).
    for (std::size_t j = 1; j < a.size(); ++j) {
      const char c = a[j];
      if (c == 'c' || c == 'm') return f;  // the rest is the command's or the module's
      if (c == 'I' || c == 'E') {
        if (f.ignores_env == 0) f.ignores_env = c;
      } else if (c == 'X' || c == 'W') {
        const std::string value = j + 1 < a.size() ? a.substr(j + 1) : (i + 1 < argv.size() ? argv[++i] : "");
        if (c == 'X') take_x(value);
        break;
      }
    }
  }
  return f;
}

std::map<std::string, std::string> hang_env(std::map<std::string, std::string> env,
                                            const std::vector<std::string>& base,
                                            const std::string& heartbeat, bool python) {
  env["DDPRUN_HEARTBEAT_FILE"] = heartbeat;
  bool user_set = env.count("PYTHONFAULTHANDLER") > 0;
  for (const auto& kv : base) user_set = user_set || kv.rfind("PYTHONFAULTHANDLER=", 0) == 0;
  if (python && !user_set) env["PYTHONFAULTHANDLER"] = "1";
  return env;
}

std::map<std::string, std::string> heartbeat_env(std::map<std::string, std::string> env,
                                                 const std::vector<std::string>& base,
                                                 const std::string& heartbeat, bool python, bool hang) {
  if (hang) return hang_env(std::move(env), base, heartbeat, python);
  env["DDPRUN_HEARTBEAT_FILE"] = heartbeat;
  return env;
}

std::string cap_stack(std::string stack, std::size_t limit) {
  if (stack.size() <= limit) return stack;
  std::size_t cut = stack.rfind('\n', limit);
  cut = cut == std::string::npos ? limit : cut + 1;
  const std::size_t left = stack.size() - cut;
  stack.resize(cut);
  stack += fmt::format("... ({} more bytes left out)\n", left);
  return stack;
}

HangWatch::HangWatch(boost::asio::io_context& io, std::optional<std::chrono::milliseconds> timeout,
                     std::function<void(const std::vector<HungRank>&)> hung)
    : timeout_(timeout), hung_(std::move(hung)), timer_(io) {}

void HangWatch::add(std::size_t worker, int rank, const std::string& heartbeat_file) {
  if (!timeout_) return;
  progress_.push_back({worker, rank, std::chrono::steady_clock::now(), false});
  beats_.push_back({heartbeat_file, std::nullopt});
  struct stat st {};
  if (!heartbeat_file.empty() && ::stat(heartbeat_file.c_str(), &st) == 0) beats_.back().mtime = st.st_mtim;
  if (!armed_) arm();
}

void HangWatch::progress(std::size_t worker) {
  for (auto& p : progress_) {
    if (p.worker == worker) p.last = std::chrono::steady_clock::now();
  }
}

void HangWatch::exited(std::size_t worker) {
  for (auto& p : progress_) {
    if (p.worker == worker) p.exited = true;
  }
}

void HangWatch::stop() {
  stopped_ = true;
  timer_.cancel();
}

void HangWatch::arm() {
  armed_ = true;
  timer_.expires_after(hang_poll_interval(*timeout_));
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopped_) return;
    const auto hung = silent_for(*timeout_);
    if (hung.empty()) {
      arm();
      return;
    }
    stopped_ = true;  // one hang per run
    hung_(hung);
  });
}

// A changed mtime is a touch; a file that is missing or unreadable is no progress.
void HangWatch::poll_heartbeats() {
  for (std::size_t i = 0; i < beats_.size(); ++i) {
    Beat& b = beats_[i];
    struct stat st {};
    if (b.file.empty() || ::stat(b.file.c_str(), &st) != 0) continue;
    const bool changed =
        !b.mtime || b.mtime->tv_sec != st.st_mtim.tv_sec || b.mtime->tv_nsec != st.st_mtim.tv_nsec;
    if (changed) progress_[i].last = std::chrono::steady_clock::now();
    b.mtime = st.st_mtim;
  }
}

std::vector<HungRank> HangWatch::silent_for(std::chrono::milliseconds threshold) {
  poll_heartbeats();
  return hung_ranks(std::chrono::steady_clock::now(), progress_, threshold);
}

std::optional<SteadyTime> HangWatch::last_progress(std::size_t worker) const {
  for (const auto& p : progress_) {
    if (p.worker == worker) return p.last;
  }
  return std::nullopt;
}

}  // namespace ddprun::agent
