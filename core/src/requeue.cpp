#include "core/requeue.hpp"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/slurm_text.hpp"

namespace ddprun::core {

namespace {

std::optional<int> exit_code(std::string_view s) {
  int v = -1;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < 0 || v > 255) return std::nullopt;
  return v;
}

}  // namespace

std::set<int> parse_exit_codes(std::string_view text) {
  std::set<int> out;
  const auto bad = [&](std::string_view part) {
    return Error(
        fmt::format("--requeue-on '{}': '{}' is not an exit code 0-255 or a range LO-HI; give e.g. "
                    "--requeue-on 140,143,200-210",
                    text, part));
  };
  std::string_view rest = text;
  while (true) {
    const auto comma = rest.find(',');
    const std::string_view part = rest.substr(0, comma);
    const auto dash = part.find('-');
    const auto lo = exit_code(part.substr(0, dash));
    const auto hi = dash == std::string_view::npos ? lo : exit_code(part.substr(dash + 1));
    if (!lo || !hi || *hi < *lo) throw bad(part);
    for (int c = *lo; c <= *hi; ++c) out.insert(c);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return out;
}

std::string format_exit_codes(const std::set<int>& codes) {
  std::string out;
  for (auto it = codes.begin(); it != codes.end();) {
    const int lo = *it;
    int hi = lo;
    while (++it != codes.end() && *it == hi + 1) ++hi;
    if (!out.empty()) out += ',';
    out += hi == lo       ? std::to_string(lo)
           : hi == lo + 1 ? fmt::format("{},{}", lo, hi)
                          : fmt::format("{}-{}", lo, hi);
  }
  return out;
}

RequeueVerdict requeue_verdict(int code, const std::set<int>& codes, int restart_count, int max_requeues,
                               JobEnd end) {
  if (codes.count(code) == 0) return RequeueVerdict::not_listed;
  if (end == JobEnd::cancelled) return RequeueVerdict::cancelled;
  return restart_count < max_requeues ? RequeueVerdict::requeue : RequeueVerdict::budget_spent;
}

JobEnd job_end_from_scontrol(std::string_view show_job) {
  const auto state = scontrol_field(show_job, "JobState");
  if (!state) return JobEnd::unknown;
  const auto preempt = scontrol_field(show_job, "PreemptTime");
  if (preempt && *preempt != "None" && !preempt->empty()) return JobEnd::preempted;
  if (scontrol_field(show_job, "Reason") == std::string_view("TimeLimit") || *state == "TIMEOUT")
    return JobEnd::time_limit;
  if (*state == "PREEMPTED") return JobEnd::preempted;
  if (*state == "RUNNING") return JobEnd::running;
  const auto reason = scontrol_field(show_job, "Reason").value_or("None");
  if ((*state == "COMPLETING" || *state == "CANCELLED") && reason == "None") return JobEnd::cancelled;
  return JobEnd::other;
}

std::string_view to_string(JobEnd e) {
  return name_of(kJobEndNames, e, "unknown");
}

std::optional<std::string> requeue_target(const EnvSnapshot& env) {
  const auto get = [&](const char* k) -> std::string {
    const auto it = env.find(k);
    return it == env.end() ? "" : it->second;
  };
  const std::string array_job = get("SLURM_ARRAY_JOB_ID"), task = get("SLURM_ARRAY_TASK_ID");
  if (!array_job.empty() && !task.empty()) return array_job + "_" + task;
  std::string job = get("SLURM_JOB_ID");
  if (job.empty()) job = get("SLURM_JOBID");
  if (job.empty()) return std::nullopt;
  return job;
}

}  // namespace ddprun::core
