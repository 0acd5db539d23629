#include "stacks.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "agent/command.hpp"
#include "agent/error.hpp"
#include "agent/live_stacks.hpp"
#include "agent/log_paths.hpp"
#include "agent/run_command.hpp"

namespace ddprun::agent {

namespace fs = std::filesystem;

HeartbeatFiles::HeartbeatFiles(std::optional<std::string> log_dir, int requeue, int attempt)
    : log_dir_(std::move(log_dir)), requeue_(requeue), attempt_(attempt) {}

std::string HeartbeatFiles::create(int rank) {
  if (!log_dir_ && !temp_dir_.make(kHeartbeatDir)) {
    throw Error(fmt::format("cannot create a directory for heartbeat files ({}): set TMPDIR or --log-dir",
                            PrivateDir::name_template(kHeartbeatDir)),
                kCannotExecute);
  }
  std::string path = worker_heartbeat_file(log_dir_, requeue_, attempt_, rank, temp_dir_.path());
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw Error(fmt::format("cannot create the heartbeat file {}: {}", path, std::strerror(errno)),
                kCannotExecute);
  }
  ::close(fd);
  return path;
}

std::vector<std::string> process_argv(pid_t pid) {
  std::vector<std::string> out;
  const int fd = ::open(fmt::format("/proc/{}/cmdline", pid).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  std::string text;
  char buf[4096];
  ssize_t n = 0;
  while (text.size() < 256 * 1024 && ((n = ::read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))) {
    if (n > 0) text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  for (std::size_t start = 0; start < text.size();) {
    const std::size_t end = std::min(text.find('\0', start), text.size());
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::string native_stack(pid_t pid, const std::string& path_env, std::chrono::milliseconds bound) {
  CommandRequest req{{"eu-stack", "-p", std::to_string(pid)}, bound};
  req.output_cap = 256 * 1024;  // cap_stack keeps 16 KiB of it
  req.path_env = path_env;
  const CommandResult r = run_command(req);
  if (r.not_found) return "eu-stack not installed (elfutils); no native stack for this worker\n";
  if (r.not_started) return fmt::format("{}\n", *r.not_started);
  if (r.timed_out) return r.output + fmt::format("(eu-stack stopped after {} ms)\n", bound.count());
  return r.output;
}

}  // namespace ddprun::agent

namespace ddprun::agent {

namespace {
// Bounds on a Python worker's dump: all of it, at the latest this long after its exit or after the
// start of the collection.
constexpr std::chrono::milliseconds kStackDrain{500};
constexpr std::chrono::milliseconds kStackWait{5000};
constexpr std::chrono::milliseconds kStackTick{100};
constexpr std::chrono::milliseconds kEuStackBound{10000};

// The first line of the stack of a Python that ignores PYTHON* variables (-I or -E, `flag`).
std::string ignored_env_line(char flag) {
  return fmt::format(
      "no Python stack: this Python runs with -{}, which ignores PYTHONFAULTHANDLER and ddprun's stacks hook "
      "(PYTHONPATH); add -X faulthandler to its command for Python frames. Its native stack:\n",
      flag);
}
}  // namespace

StackCollector::StackCollector(boost::asio::io_context& io, const std::vector<std::unique_ptr<Proc>>& procs)
    : procs_(procs), timer_(io) {}

void StackCollector::start(const std::vector<HungRank>& hung, bool python, const std::string& path_env,
                           const std::vector<std::string>& stacks_files, std::function<void()> done) {
  collecting_ = true;
  done_ = std::move(done);
  started_ = std::chrono::steady_clock::now();
  for (const auto& h : hung) {
    const Proc& p = *procs_.at(h.worker);
    const std::string file = h.worker < stacks_files.size() ? stacks_files[h.worker] : std::string();
    const bool hooked = hook_registered(p.pid(), file);
    // -I and -E: Python ignores PYTHONFAULTHANDLER, so SIGABRT would end it without a stack.
    const PythonFlags flags = python && !hooked ? python_flags(process_argv(p.pid())) : PythonFlags{};
    const bool abort = python && !hooked && (flags.ignores_env == 0 || flags.faulthandler);
    hung_.push_back({h.rank, p.worker().local_rank, p.pid(), h.silent, hooked || abort, {}});
    if (abort) {
      // A Python worker whose hook did not register (python -S, a shell still starting it):
      // faulthandler's dump on SIGABRT, which ends it.
      targets_.push_back({h.worker, hung_.size() - 1, std::nullopt});
      ::kill(p.pid(), SIGABRT);  // the process only: its children are not what hangs
    } else {
      // The path of `ddprun stacks`: the hook's dump (the worker keeps running), else eu-stack.
      const std::string why = python && !hooked ? ignored_env_line(flags.ignores_env) : std::string();
      hung_.back().stack = cap_stack(why + live_stack(p.pid(), file, path_env, kEuStackBound));
    }
  }
  arm();
}

bool StackCollector::aborted(std::size_t worker) const {
  for (const auto& t : targets_) {
    if (t.worker == worker) return true;
  }
  return false;
}

void StackCollector::line(std::size_t worker, bool is_err, std::string_view text) {
  if (!collecting_ || !is_err) return;
  for (const auto& t : targets_) {
    if (t.worker != worker) continue;
    std::string& s = hung_[t.hung].stack;
    if (s.size() <= 2 * 16 * 1024) s.append(text).append("\n");  // cap_stack trims at the end
  }
}

void StackCollector::arm() {
  if (drained() || std::chrono::steady_clock::now() - started_ >= kStackWait) {
    finish();
    return;
  }
  timer_.expires_after(kStackTick);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) arm();
  });
}

bool StackCollector::drained() {
  const auto now = std::chrono::steady_clock::now();
  bool all = true;
  for (auto& t : targets_) {
    const Proc& p = *procs_.at(t.worker);
    if (p.end.exited && !t.exit_seen) t.exit_seen = now;
    const bool done = t.exit_seen && (!p.reading(true) || now - *t.exit_seen >= kStackDrain);
    all = all && done;
  }
  return all;
}

void StackCollector::finish() {
  collecting_ = false;
  for (const auto& t : targets_) {
    std::string& s = hung_[t.hung].stack;
    if (s.empty()) {
      s = "no Python stack: the worker wrote nothing to stderr after SIGABRT (the program handles SIGABRT "
          "itself, turned faulthandler off, or runs with PYTHONFAULTHANDLER set empty)\n";
    }
    s = cap_stack(std::move(s));
  }
  if (done_) std::exchange(done_, nullptr)();
}

}  // namespace ddprun::agent
