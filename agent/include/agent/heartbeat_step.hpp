#pragma once
// A worker's training step, as it reports it in its heartbeat file (DDPRUN_HEARTBEAT_FILE): the file's
// whole text is a decimal number, `1200`, or `step 1200`, white space around it allowed. Touching the
// file without writing says "alive" (--hang-timeout) but reports no step. Used by the restart policy
// (--max-restarts-without-progress) and by anything that shows a rank's step.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::agent {

using Step = std::int64_t;

// At most this many bytes of a heartbeat file are read; a longer file reports no step.
inline constexpr std::size_t kHeartbeatReadCap = 256;

// The step in `text`, or nullopt for anything else: empty or blank text, a sign, no digits, other
// words, trailing garbage, a number past int64, bytes that are not printable ASCII.
std::optional<Step> parse_heartbeat_step(std::string_view text);

// The step in the file at `path`; nullopt when it is missing, unreadable, longer than
// kHeartbeatReadCap bytes or holds no step. Never throws.
std::optional<Step> read_heartbeat_step(const std::string& path);

// The highest step of these files (the ranks of one node); nullopt when none holds one.
std::optional<Step> best_heartbeat_step(const std::vector<std::string>& paths);

}  // namespace ddprun::agent
