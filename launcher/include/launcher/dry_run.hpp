#pragma once
// `ddprun --dry-run`: the plan as a readable table or as one JSON object. Pure rendering.
#include <optional>
#include <set>
#include <string>

#include "core/config.hpp"
#include "core/cpu_bind.hpp"

namespace ddprun::launcher {

std::string render_plan_text(const core::Resolved& r, const core::Plan& plan);
std::string render_plan_json(const core::Resolved& r, const core::Plan& plan);

// The startup table node rank 0 prints once the plan is agreed: one row per node (first and last
// rows only past `max_rows` nodes) with its host, ranks and the GPUs each rank sees, and the master
// address.
std::string render_startup_table(const core::Plan& plan, int attempt, std::size_t max_rows = 16);

// What each of one node's workers sees as CUDA_VISIBLE_DEVICES, as groups of consecutive ranks that
// see the same list: "0-3:0,1,2,3" (every worker sees the node's GPUs), "4:0,1 5:2,3" (slices of
// --gpus-per-proc 2); "-" when no worker has a GPU.
std::string gpus_seen(const std::vector<core::Worker>& node_workers);

// The plan this node would run before the rendezvous replaces assumptions with facts.
core::Plan dry_run_plan(const core::Resolved& r);

// --cpu-bind for the dry run: binds the workers this ddprun would spawn (this node's; in per-task
// mode its one task) on `topo` within `allowed`, as the run will. Other nodes' workers stay unbound:
// their agents decide on their own machines. A batch script binds nothing (it is not a node that runs
// workers). Returns the decision's warning; throws core::Error for an impossible request.
std::optional<std::string> bind_this_node(const core::Resolved& r, core::Plan& plan,
                                          const core::Topology& topo, const std::set<int>& allowed);

}  // namespace ddprun::launcher
