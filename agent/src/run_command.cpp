#include "agent/run_command.hpp"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>

#include <fmt/format.h>

#include "agent/command.hpp"
#include "agent/error.hpp"
#include "agent/signals.hpp"
#include "agent/spawn.hpp"
#include "core/duration.hpp"

namespace ddprun::agent {

void keep_output(std::string& text, std::size_t& dropped, std::string_view more, std::size_t cap, bool tail) {
  if (!tail) {
    const std::size_t room = text.size() < cap ? cap - text.size() : 0;
    const std::size_t take = std::min(room, more.size());
    text.append(more.substr(0, take));
    dropped += more.size() - take;
    return;
  }
  text.append(more);
  if (text.size() > cap) {
    dropped += text.size() - cap;
    text.erase(0, text.size() - cap);
  }
}

std::vector<std::string> shell_command(const std::string& command) {
  return {"/bin/sh", "-c", command};
}

std::string describe_run(const CommandResult& r, std::chrono::milliseconds timeout) {
  if (r.not_started) return *r.not_started;
  if (r.timed_out) return fmt::format("did not finish within {:g} s", core::seconds(timeout));
  return describe_exit(r.status);
}

namespace {

// The command's pipes until it exits and what it left in them is read, or the deadline; true when it
// exited in time.
bool collect(const Spawned& s, const CommandRequest& req, CommandResult& r) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + req.timeout;
  int pipes[2] = {s.stdout_fd.get(), s.stderr_fd.get()};  // stderr: open only to be discarded
  bool exited = false;
  char buf[4096];
  for (;;) {
    pollfd fds[3];
    nfds_t n = 0;
    if (!exited) fds[n++] = {s.exit_fd.get(), POLLIN, 0};
    for (const int fd : pipes) {
      if (fd >= 0) fds[n++] = {fd, POLLIN, 0};
    }
    if (n == 0) return true;  // exited, and both pipes closed
    if (req.stop_on_held_signal && held_stop_signal() != 0) {
      r.stopped = true;
      return false;
    }
    if (!exited && req.stop_when && req.stop_when()) {
      r.stopped_when = true;
      return false;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return exited;
    // Once it exited, only what is already in the pipes. A held stop and stop_when are looked at every
    // 100 ms.
    const long long step = req.stop_on_held_signal || req.stop_when ? 100 : 60000;
    const int ready = ::poll(fds, n, exited ? 0 : static_cast<int>(std::min<long long>(left, step)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      if (ready < 0 || exited) return exited;
      continue;
    }
    for (nfds_t i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      if (fds[i].fd == s.exit_fd.get()) {
        exited = true;
        continue;
      }
      const ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
      if (got < 0 && errno == EINTR) continue;
      const bool is_out = fds[i].fd == pipes[0];
      if (got <= 0) {
        (is_out ? pipes[0] : pipes[1]) = -1;
      } else if (is_out) {
        keep_output(r.output, r.dropped, {buf, static_cast<std::size_t>(got)}, req.output_cap, req.keep_tail);
      }
    }
  }
}

}  // namespace

CommandResult run_command(const CommandRequest& req) {
  CommandResult r;
  if (req.argv.empty() || req.argv.front().empty()) {
    r.not_started = "no command";
    return r;
  }
  const std::string& name = req.argv.front();
  const char* agent_path = std::getenv("PATH");
  const std::string path = req.path_env.value_or(agent_path != nullptr ? agent_path : "/usr/bin:/bin");
  const auto program = find_in_path(name, path);
  if (!program) {
    r.not_found = true;
    r.not_started = fmt::format("{} not found on PATH", name);
    return r;
  }
  SpawnRequest sreq;
  sreq.program = *program;
  sreq.argv = req.argv;
  sreq.env = current_environment();
  sreq.stderr_to_stdout = req.stderr_too;
  sreq.ignored_signals = req.ignored_signals;
  Spawned s;
  try {
    s = spawn_process(sreq);
  } catch (const Error& e) {
    r.not_started = fmt::format("{} could not start: {}", name, e.what());
    return r;
  }
  r.timed_out = !collect(s, req, r) && !r.stopped && !r.stopped_when;
  ::kill(-s.pid, SIGKILL);  // the whole group at the deadline; after an exit, what it left behind
  int st = 0;
  while (::waitpid(s.pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (!r.timed_out && !r.stopped && !r.stopped_when) r.status = decode_wait_status(st);
  return r;
}

}  // namespace ddprun::agent
