#include "agent/live_stacks.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "core/stack_groups.hpp"
#include "stacks.hpp"

namespace ddprun::agent {

namespace {

// Runs at the start of every Python process that has our directory on its PYTHONPATH (site imports
// sitecustomize; a PYTHONSTARTUP would not run for scripts). The first Python process of a worker
// claims the rank's file (O_EXCL: a subprocess or a DataLoader's interpreter does not), registers
// faulthandler on the signal, then writes the marker ddprun looks for before it signals anything.
// Then the user's own sitecustomize, the next one on sys.path, runs as it would have.
constexpr const char* kHook =
    R"PY(# Written by ddprun (docs/observe.md, `ddprun stacks`); removed after the run.
import os as _os
import sys as _sys


def _ddprun_register():
    path = _os.environ.get("DDPRUN_STACKS_FILE")
    sig = _os.environ.get("DDPRUN_STACKS_SIGNAL")
    if not path or not sig:
        return
    try:
        fd = _os.open(path, _os.O_WRONLY | _os.O_CREAT | _os.O_EXCL | _os.O_APPEND, 0o600)
    except OSError:
        return
    try:
        import faulthandler
        f = _os.fdopen(fd, "w")
        faulthandler.register(int(sig), file=f, all_threads=True, chain=False)
        _sys._ddprun_stacks_file = f  # faulthandler needs the file kept open
        f.write("ddprun-stacks %d\n" % _os.getpid())
        f.flush()
    except Exception:
        pass


def _ddprun_chain():
    here = _os.path.dirname(_os.path.abspath(__file__))
    import importlib.machinery
    import importlib.util
    for d in _sys.path:
        try:
            if _os.path.abspath(d or ".") == here:
                continue
            spec = importlib.machinery.PathFinder.find_spec("sitecustomize", [d])
        except Exception:
            continue
        if spec is not None and spec.loader is not None:
            mod = importlib.util.module_from_spec(spec)
            _sys.modules["sitecustomize"] = mod
            spec.loader.exec_module(mod)
            return


_ddprun_register()
_ddprun_chain()
)PY";

std::string lookup(const std::map<std::string, std::string>& env, const std::vector<std::string>& base,
                   const std::string& name) {
  if (const auto it = env.find(name); it != env.end()) return it->second;
  for (const auto& kv : base) {
    if (kv.size() > name.size() && kv.compare(0, name.size(), name) == 0 && kv[name.size()] == '=') {
      return kv.substr(name.size() + 1);
    }
  }
  return {};
}

std::optional<off_t> file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return st.st_size;
}

// Bytes [from, from + max) of `path`.
std::string read_from(const std::string& path, off_t from, std::size_t max) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string out(max, '\0');
  std::size_t got = 0;
  while (got < max) {
    const ssize_t n = ::pread(fd, out.data() + got, max - got, from + static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  out.resize(got);
  return out;
}

std::optional<pid_t> registered_pid(pid_t pgid, const std::string& stacks_file) {
  if (stacks_file.empty() || pgid <= 0) return std::nullopt;
  const auto pid = core::parse_stacks_marker(read_from(stacks_file, 0, 64));
  if (!pid) return std::nullopt;
  // Only a live process of this worker's group: a pid that ended and was reused is not signalled
  // (the signal's default action would end it).
  if (::getpgid(static_cast<pid_t>(*pid)) != pgid) return std::nullopt;
  return static_cast<pid_t>(*pid);
}

constexpr std::chrono::milliseconds kSettle{150};  // no growth this long after some: the dump is whole
constexpr std::chrono::milliseconds kTick{20};
constexpr std::size_t kMaxDump = 256 * 1024;

}  // namespace

int stacks_signal() {
  return SIGRTMIN + 6;
}

bool PythonStackHook::prepare() {
  if (dir_.made()) return true;
  if (failed_ || !dir_.make(kStacksDir)) {
    failed_ = true;
    return false;
  }
  const std::string path = dir_.path() + "/sitecustomize.py";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const std::string_view text = kHook;
  const bool ok = fd >= 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  if (fd >= 0) ::close(fd);
  failed_ = !ok;
  return ok;
}

std::map<std::string, std::string> stacks_hook_env(std::map<std::string, std::string> env,
                                                   const std::string& their_pythonpath,
                                                   const std::string& dir, int rank) {
  env["PYTHONPATH"] = their_pythonpath.empty() ? dir : dir + ":" + their_pythonpath;
  env["DDPRUN_STACKS_FILE"] = stacks_hook_file(dir, rank);
  env["DDPRUN_STACKS_SIGNAL"] = std::to_string(stacks_signal());
  return env;
}

std::string stacks_hook_file(const std::string& dir, int rank) {
  return fmt::format("{}/rank-{}.stacks", dir, rank);
}

std::map<std::string, std::string> PythonStackHook::env(std::map<std::string, std::string> env,
                                                        const std::vector<std::string>& base, int rank) {
  if (!prepare()) return env;
  const std::string theirs = lookup(env, base, "PYTHONPATH");
  return stacks_hook_env(std::move(env), theirs, dir_.path(), rank);
}

std::string PythonStackHook::file(int rank) const {
  return dir_.made() && !failed_ ? stacks_hook_file(dir_.path(), rank) : std::string();
}

bool hook_registered(pid_t pgid, const std::string& stacks_file) {
  return registered_pid(pgid, stacks_file).has_value();
}

std::string live_stack(pid_t pgid, const std::string& stacks_file, const std::string& path_env,
                       std::chrono::milliseconds bound) {
  const auto pid = registered_pid(pgid, stacks_file);
  if (!pid) return native_stack(pgid, path_env, bound);
  const auto before = file_size(stacks_file);
  if (!before || ::kill(*pid, stacks_signal()) != 0) return native_stack(pgid, path_env, bound);
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + bound;
  off_t seen = *before;
  auto grew_at = Clock::now();
  while (Clock::now() < deadline) {
    std::this_thread::sleep_for(kTick);
    const auto now_size = file_size(stacks_file).value_or(seen);
    if (now_size != seen) {
      seen = now_size;
      grew_at = Clock::now();
    } else if (seen > *before && Clock::now() - grew_at >= kSettle) {
      break;
    }
  }
  if (seen <= *before) {
    return fmt::format("no Python stack: process {} did not answer signal {} within {} ms\n", *pid,
                       stacks_signal(), bound.count());
  }
  const auto n = static_cast<std::size_t>(seen - *before);
  return read_from(stacks_file, *before, n < kMaxDump ? n : kMaxDump);
}

}  // namespace ddprun::agent
