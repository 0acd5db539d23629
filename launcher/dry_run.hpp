#pragma once
// `ddprun --dry-run`: the plan as a readable table or as one JSON object. Pure rendering.
#include <string>

#include "launcher/config.hpp"

namespace ddprun::launcher {

std::string render_plan_text(const Resolved& r, const Plan& plan);
std::string render_plan_json(const Resolved& r, const Plan& plan);

// The plan this node would run before the rendezvous replaces assumptions with facts.
Plan dry_run_plan(const Resolved& r);

}  // namespace ddprun::launcher
