#pragma once
// `ddprun --dry-run`: the plan as a readable table or as one JSON object. Pure rendering.
#include <string>

#include "core/config.hpp"

namespace ddprun::launcher {

std::string render_plan_text(const core::Resolved& r, const core::Plan& plan);
std::string render_plan_json(const core::Resolved& r, const core::Plan& plan);

// The startup table node rank 0 prints once the plan is agreed: one row per node (first and last
// rows only past `max_rows` nodes) with its host, ranks and GPUs, and the master address.
std::string render_startup_table(const core::Plan& plan, int attempt, std::size_t max_rows = 16);

// The plan this node would run before the rendezvous replaces assumptions with facts.
core::Plan dry_run_plan(const core::Resolved& r);

}  // namespace ddprun::launcher
