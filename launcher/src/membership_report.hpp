#pragma once
// What the user sees when an elastic job's membership changes (docs/elastic.md): one text line on
// the new round's node rank 0, or the JSON events node_lost, spare_promoted (a standby took a lost node's
// place; the event keeps its published name) and membership_changed.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/events.hpp"
#include "core/elastic.hpp"

namespace ddprun::launcher {

// The text line; empty when nothing changed.
std::string membership_line(int attempt, const std::vector<core::Member>& before,
                            const std::vector<core::Member>& after, int old_world, int new_world);

// One attempt as the job's last line names it.
struct AttemptRecord {
  int attempt = 0;
  int world_size = 0;
  int exit_code = 0;
  std::string cause;  // the root cause's reason; empty on success
};

// "ddprun: attempts: 0 (world size 4) failed, exit 1: lost the agent on n3 (node rank 2); 1 (world
// size 3) succeeded\n"; empty for a job of one attempt.
std::string attempts_line(const std::vector<AttemptRecord>& attempts);
nlohmann::json attempts_json(const std::vector<AttemptRecord>& attempts);

void report_membership(agent::Events& ev, bool quiet, int attempt, const std::vector<core::Member>& before,
                       const std::vector<core::Member>& after, int old_world, int new_world);

}  // namespace ddprun::launcher
