#pragma once
// The live status an agent publishes for `ddprun top` (docs/observe.md): one record per node, kept
// under one store key each and overwritten about once a second. Pure: the record, its compact JSON
// codec, the last-line cleaning, the /proc parsing and the CPU share, the publication interval.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/enum_names.hpp"

namespace ddprun::core {

// Bytes of a rank's last line kept in the record (then cut at a character boundary).
inline constexpr std::size_t kStatusLineBytes = 160;

// What a rank is doing, as `ddprun top` shows it.
enum class RankState { starting, running, hung, exited, stopped };
inline constexpr std::array<EnumName<RankState>, 5> kRankStateNames{{{RankState::starting, "starting"},
                                                                     {RankState::running, "running"},
                                                                     {RankState::hung, "hung"},
                                                                     {RankState::exited, "exited"},
                                                                     {RankState::stopped, "stopped"}}};
const char* to_string(RankState s);
std::optional<RankState> rank_state_from_string(std::string_view s);

struct RankStatus {
  int rank = 0;
  int local_rank = 0;
  std::int64_t pid = 0;
  RankState state = RankState::starting;
  std::optional<int> exit_code;            // exited or stopped: its code (128 + signal for a signal)
  double run_seconds = 0;                  // since its start (until its end once it ended)
  std::string last_line;                   // cleaned (clean_status_line)
  std::optional<double> progress_age;      // seconds since its last output line or heartbeat touch
  std::optional<std::int64_t> step;        // the step in its heartbeat file (heartbeat_step.hpp), if any
  std::optional<std::uint64_t> rss_bytes;  // of the worker's process (group leader)
  std::optional<double> cpu_percent;       // of one core, over the last interval
  int restarts = 0;
};

// What an agent knows of one worker when it makes its record.
struct WorkerFacts {
  bool exited = false;
  bool stopped_by_ddprun = false;  // with `exited`: ddprun's teardown stopped it
  bool hung = false;               // named by the hang watch (--hang-timeout)
  bool progressed = false;         // an output line or a heartbeat touch since its start
};
// The state `top` shows for the worker: stopped (by ddprun) or exited once it ended; else hung, running
// after any progress, or starting.
RankState rank_state(const WorkerFacts& w);
// The agent's state in its record: finished once every worker exited, else collecting_stacks (a hang's
// stacks), stopping (the teardown), or running.
const char* agent_state_of(bool all_exited, bool collecting_stacks, bool stopping);

// One node's record. The job fields (attempt, world size, nodes, elastic events) ride on every
// node's record: `top` reads them from node rank 0's.
struct NodeStatus {
  int node_rank = 0;
  std::string host;
  std::string agent_state;        // running, stopping, collecting_stacks, finished
  std::int64_t published_ms = 0;  // the agent's wall clock (Unix ms) when it made the record
  int attempt = 0;
  int world_size = 0;
  int nnodes = 0;
  int elastic_events = 0;
  std::vector<RankStatus> ranks;
};

// Compact JSON (short keys); decode throws core::Error on anything malformed (a record comes from
// another process over the network).
std::string encode_node_status(const NodeStatus& s);
NodeStatus decode_node_status(std::string_view record);

// What a terminal shows of a line that redraws itself with carriage returns (a progress bar): the
// text after the last carriage return that has text after it.
std::string_view visible_part(std::string_view line);

// A line of worker output made safe to show and to carry: the text after its last carriage return
// (a progress bar redraws with \r), control characters as spaces, cut to `max` bytes at a UTF-8
// character boundary; invalid UTF-8 becomes U+FFFD.
std::string clean_status_line(std::string_view line, std::size_t max = kStatusLineBytes);

// /proc/<pid>/stat: user + system CPU time in clock ticks (fields 14 and 15, counted after the
// command's closing parenthesis, since the command may hold spaces and parentheses). nullopt when
// malformed.
std::optional<std::uint64_t> parse_proc_stat_cpu_ticks(std::string_view stat);
// /proc/<pid>/statm: resident pages (the second field). nullopt when malformed.
std::optional<std::uint64_t> parse_proc_statm_resident_pages(std::string_view statm);
// CPU% of one core between two readings `elapsed_s` apart; nullopt without a sane interval.
std::optional<double> cpu_percent(std::uint64_t ticks_before, std::uint64_t ticks_now, double elapsed_s,
                                  long ticks_per_second);

// How often an agent publishes: 1 s, growing with the job so that node rank 0 takes at most
// kMaxStatusRate records a second (as the heartbeats do).
inline constexpr int kMaxStatusRate = 4096;
std::int64_t status_interval_ms(int nnodes);

// The store key of a node's record (outside the attempts' namespaces: `top` needs no attempt).
std::string status_key(int node_rank);
// Written instead of any record by a job that publishes none (per-task mode), its value the reason, so
// that `top` and `stacks` say so rather than "still joining".
inline constexpr const char* kNoStatusKey = "/status/none";
// Written by node 0's agent as its job ends, just before its store closes: `top` watching it then tells
// a job that finished from a node 0 that was lost.
inline constexpr const char* kJobEndKey = "/status/end";

}  // namespace ddprun::core
