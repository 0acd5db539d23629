#pragma once
// What the user sees when an elastic job's membership changes (docs/elastic.md): one text line on
// the new round's node rank 0, or the JSON events node_lost, spare_promoted and membership_changed.
#include <string>
#include <vector>

#include "agent/events.hpp"
#include "core/elastic.hpp"

namespace ddprun::launcher {

// The text line; empty when nothing changed.
std::string membership_line(int attempt, const std::vector<core::Member>& before,
                            const std::vector<core::Member>& after, int old_world, int new_world);

void report_membership(agent::Events& ev, bool quiet, int attempt, const std::vector<core::Member>& before,
                       const std::vector<core::Member>& after, int old_world, int new_world);

}  // namespace ddprun::launcher
