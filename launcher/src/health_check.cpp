// --health-check: the verdict (pure) and the run (sh -c through the one runner, agent/run_command.hpp).
#include "launcher/health_check.hpp"

#include <algorithm>
#include <chrono>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "agent/run_command.hpp"
#include "agent/signals.hpp"
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

HealthCheckRun run_health_check(const std::string& command, double timeout_s,
                                const std::function<bool()>& stop) {
  agent::CommandRequest req{agent::shell_command(command), std::chrono::ceil<std::chrono::milliseconds>(
                                                               std::chrono::duration<double>(timeout_s))};
  req.output_cap = kHealthCheckOutputCap;
  req.keep_tail = true;            // the verdict is at the end
  req.stop_on_held_signal = true;  // a stop (scancel, Ctrl-C) ends the check at once
  req.stop_when = stop;            // as does the caller's reason (the job ended meanwhile)
  // With the default dispositions the agent would die at once and leave the check's children behind.
  agent::hold_stop_signals();
  agent::CommandResult r;
  try {
    r = agent::run_command(req);
  } catch (...) {
    agent::release_stop_signals();
    throw;
  }
  HealthCheckRun run{r.timed_out, r.status.exit_code, r.output};
  run.interrupted = r.stopped_when;
  run.stopped = agent::release_stop_signals();  // 0: released; else the stop, still held
  if (run.stopped != 0) {
    run.timed_out = false;
    return run;
  }
  if (r.not_started) throw core::Error(fmt::format("--health-check: {}", *r.not_started), 1);
  return run;
}

NodeHealth check_node_health(const core::Options& o, const core::Resolved& r,
                             const std::function<bool()>& stop) {
  if (!o.health_check) return {};
  // Per-task mode: the node's check is its relay's (local task 0), which tells the others.
  if (r.mode == core::Mode::per_task && r.job.task_local_rank.value_or(0) != 0) return {};
  const HealthCheckRun run = run_health_check(*o.health_check, o.health_check_timeout, stop);
  if (run.stopped != 0) return {std::nullopt, run.stopped};
  if (run.interrupted) return {};
  return {
      judge_health_check(run, r.self.host.value_or("localhost"), r.job.node_rank, o.health_check_timeout)};
}

}  // namespace ddprun::launcher
