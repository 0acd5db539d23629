#pragma once
// The failure report (stderr and JSON) and the summary table every run ends with.
#include <chrono>
#include <string>
#include <string_view>

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

// A worker's text as the report prints it: its bytes must never drive the user's terminal. Control
// bytes (C0 but tab, DEL), C1 controls (U+0080-U+009F) and bytes that are not UTF-8 become `\xNN`;
// everything else, valid UTF-8 included, is kept.
std::string escape_control(std::string_view text);

// The report of a failed run: root cause first (time, host, node rank, rank, local rank, exit code or
// signal, pid, last stderr lines), then the other failed workers. Text for stderr; `colour` adds
// ANSI colour to the headline and the root-cause header (see use_colour), nothing else changes.
std::string format_report(const RunResult& r, bool colour = false, ReportLength length = ReportLength::full);
nlohmann::json report_to_json(const RunResult& r);

// Compact table: rank, local rank, host, exit, duration; one line per local worker. `colour` paints
// "success" green and "FAILED" red in the header.
std::string format_summary(const RunResult& r, bool colour = false);

}  // namespace ddprun::agent
