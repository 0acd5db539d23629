#pragma once
// The failure report (stderr and JSON) and the summary table every run ends with.
#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "agent/coordinator.hpp"
#include "agent/result.hpp"

namespace ddprun::agent {

using core::failure_from_json;
using core::failure_to_json;
using core::format_time;

// How much of the failure report: everything, or (--quiet) the headline and the root cause only,
// without the list of the other failed workers.
enum class ReportLength { full, brief };

// The report of a failed run: root cause first (time, host, node rank, rank, local rank, exit code or
// signal, pid, last stderr lines), then the other failed workers. Text for stderr; `colour` adds
// ANSI colour to the headline and the root-cause header (see use_colour), nothing else changes.
std::string format_report(const RunResult& r, bool colour = false, ReportLength length = ReportLength::full);
nlohmann::json report_to_json(const RunResult& r);

// Compact table: rank, local rank, host, exit, duration; one line per local worker. `colour` paints
// "success" green and "FAILED" red in the header.
std::string format_summary(const RunResult& r, bool colour = false);

}  // namespace ddprun::agent
