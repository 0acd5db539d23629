// --health-check: the verdict (pure) and the run (fork, exec sh -c, timeout, group kill, capture).
#include "launcher/health_check.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"

namespace ddprun::launcher {

std::string output_tail(std::string_view output, std::size_t lines) {
  std::vector<std::string_view> kept;
  std::size_t end = output.size();
  while (end > 0 && kept.size() < lines) {
    const std::size_t nl = output.rfind('\n', end - 1);
    const std::size_t begin = nl == std::string_view::npos ? 0 : nl + 1;
    std::string_view line = output.substr(begin, end - begin);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.empty()) kept.push_back(line);
    if (nl == std::string_view::npos) break;
    end = nl;
  }
  std::string out;
  for (auto it = kept.rbegin(); it != kept.rend(); ++it) {
    if (!out.empty()) out += " | ";
    for (const char ch : *it) {
      const auto c = static_cast<unsigned char>(ch);
      // One line on any terminal: bytes outside printable ASCII are escaped (UTF-8 too: simplest safe).
      if (c >= 0x20 && c < 0x7f) {
        out += ch;
      } else {
        out += fmt::format("\\x{:02x}", c);
      }
    }
  }
  return out;
}

std::optional<std::string> judge_health_check(const HealthCheckRun& run, const std::string& host,
                                              std::optional<int> node_rank, double timeout_s) {
  if (!run.timed_out && run.status == 0) return std::nullopt;
  const std::string node =
      node_rank ? fmt::format("node {} ({})", *node_rank, host) : fmt::format("node {}", host);
  const std::string what = run.timed_out ? fmt::format("timed out after {:g} s", timeout_s)
                                         : fmt::format("exited with code {}", run.status);
  const std::string tail = output_tail(run.output, kHealthCheckTailLines);
  return fmt::format(
      "{} failed its health check (--health-check): {}; {}; fix the node or leave it out of the job", node,
      what, tail.empty() ? std::string("no output") : "output: " + tail);
}

std::optional<std::string> left_out_line(int nagents, const std::vector<int>& joined_ranks,
                                         const std::vector<std::string>& hosts) {
  std::vector<std::string> missing;
  for (int r = 0; r < nagents; ++r) {
    if (std::find(joined_ranks.begin(), joined_ranks.end(), r) != joined_ranks.end()) continue;
    const auto i = static_cast<std::size_t>(r);
    missing.push_back(i < hosts.size() && !hosts[i].empty() ? fmt::format("{} (node rank {})", hosts[i], r)
                                                            : fmt::format("node rank {}", r));
  }
  if (missing.empty()) return std::nullopt;
  return fmt::format(
      "the first round closed without {} of the step's {} nodes: {} (did not join: a failed --health-check, "
      "or not started in time); the job runs on the other {}",
      missing.size(), nagents, fmt::join(missing, ", "), nagents - static_cast<int>(missing.size()));
}

namespace {

void keep_last(std::string& buf, const char* data, std::size_t n) {
  buf.append(data, n);
  if (buf.size() > kHealthCheckOutputCap) buf.erase(0, buf.size() - kHealthCheckOutputCap);
}

int status_code(int st) {
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return 1;
}

}  // namespace

HealthCheckRun run_health_check(const std::string& command, double timeout_s,
                                const std::function<bool()>& stop) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw core::Error(fmt::format("--health-check: cannot make a pipe: {}", std::strerror(errno)), 1);
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    throw core::Error(fmt::format("--health-check: cannot fork: {}", std::strerror(err)), 1);
  }
  if (pid == 0) {
    // Its own group, so that the timeout kills whatever it started too; the shell dies with an agent
    // killed meanwhile.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, 0);
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    // The agent may hold stopping signals; the check gets the default dispositions and mask.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here: no race with the kill below
  ::close(fds[1]);
  HealthCheckRun run;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  bool open = true;
  bool exited = false;
  int st = 0;
  char buf[4096];
  while (!exited || open) {
    if (!exited) {
      const pid_t w = ::waitpid(pid, &st, WNOHANG);
      if (w == pid) exited = true;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    if (!exited && stop && stop()) {
      run.stopped = true;
      break;
    }
    if (!open) {
      // The output closed, the shell not gone yet: poll its end in short steps.
      ::usleep(10000);
      continue;
    }
    // Once the shell is gone, only what is already in the pipe is read: a background child that
    // holds the pipe open does not keep the agent waiting.
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
    pollfd p{fds[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, exited ? 0 : static_cast<int>(std::min<long long>(left, 100)));
    if (ready > 0) {
      const ssize_t n = ::read(fds[0], buf, sizeof buf);
      if (n > 0) {
        keep_last(run.output, buf, static_cast<std::size_t>(n));
        continue;
      }
      if (n == 0 || errno != EINTR) open = false;
    } else if (ready == 0 && exited) {
      open = false;
    }
  }
  ::close(fds[0]);
  if (!exited) {
    run.timed_out = !run.stopped;
    ::kill(-pid, SIGKILL);
    ::waitpid(pid, &st, 0);
    return run;
  }
  // Whatever the check left behind in its group ends with it.
  ::kill(-pid, SIGKILL);
  run.status = status_code(st);
  return run;
}

std::optional<std::string> check_node_health(const core::Options& o, const core::Resolved& r,
                                             const std::function<bool()>& stop) {
  if (!o.health_check) return std::nullopt;
  // Per-task mode: the node's check is its relay's (local task 0), which tells the others.
  if (r.mode == core::Mode::per_task && r.job.task_local_rank.value_or(0) != 0) return std::nullopt;
  const HealthCheckRun run = run_health_check(*o.health_check, o.health_check_timeout, stop);
  if (run.stopped) return std::nullopt;
  return judge_health_check(run, r.self.host.value_or("localhost"), r.job.node_rank, o.health_check_timeout);
}

}  // namespace ddprun::launcher
