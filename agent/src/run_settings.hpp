#pragma once
// What the parts of one run read of the options and the attempt, each part only its own fields: built
// here, in one place, when a run starts (supervisor_impl.hpp), so that the output relay, the reporter
// and the hang guard never see the whole AgentOptions.
#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/attempt_context.hpp"
#include "agent/log_paths.hpp"
#include "agent/options.hpp"

namespace ddprun::agent {

class Events;

// The output relay's (output_relay.hpp).
struct RelaySettings {
  bool prefix_on = false;  // --prefix given, or several ranks in the job; never with --no-prefix
  std::string prefix_template;
  std::chrono::milliseconds redraw_interval{0};     // to a file or pipe
  std::optional<std::set<int>> local_ranks_filter;  // local ranks shown on the console
  std::optional<std::string> log_dir;               // per-rank files under it
  int requeue = 0;
  int attempt = 0;
  bool json_events = false;  // events for programs: no escape sequences, nothing drawn over
};

// The reporter's (reporter.hpp).
struct ReportSettings {
  std::vector<std::string> command;  // for a command that cannot start
  bool module = false;
  std::chrono::milliseconds term_timeout{0};
  std::optional<std::string> error_file;
  std::optional<std::string> log_dir;
  int requeue = 0;
  int attempt = 0;
  int agents = 1;
  std::optional<int> task_rank;
  bool quiet = false;
  bool verbose = false;
  Events* events = nullptr;  // null: text on stderr
};

// The hang guard's (hang_guard.hpp).
struct HangSettings {
  std::optional<std::chrono::milliseconds> timeout;  // --hang-timeout
  bool step_files = false;  // heartbeat files for --max-restarts-without-progress, hang timeout or not
  std::optional<std::string> log_dir;
  int requeue = 0;
  int attempt = 0;
};

RelaySettings relay_settings(const AgentOptions& opts, const AttemptContext& attempt, int world_size,
                             const Events* events);
ReportSettings report_settings(const AgentOptions& opts, const AttemptContext& attempt, Events* events);
HangSettings hang_settings(const AgentOptions& opts, const AttemptContext& attempt);

// Where this node's error file of the run goes (log_paths.hpp).
ErrorFileSpec error_file_spec(const ReportSettings& s, int node_rank);

}  // namespace ddprun::agent
