#pragma once
// `ddprun --dry-run`: the plan as a readable table or as one JSON object, and the startup table.
// The whole plan is never held at once: each node's workers are derived (core::derive_workers) and
// written in turn: memory is the table plus one node's workers (16,384 nodes x 8: 11 MB, docs/scale.md).
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "agent/options.hpp"
#include "core/config.hpp"
#include "core/cpu_bind.hpp"
#include "core/plan_table.hpp"

namespace ddprun::launcher {

// What a run adds to every worker's variables besides the plan's, set by the agent as it starts the
// worker: TORCHELASTIC_ERROR_FILE, with --hang-timeout or --max-restarts-without-progress
// DDPRUN_HEARTBEAT_FILE, and with --hang-timeout, for a Python command, PYTHONFAULTHANDLER=1 unless
// the user set it; and the `ddprun stacks` hook's PYTHONPATH, DDPRUN_STACKS_FILE and
// DDPRUN_STACKS_SIGNAL (agent::stacks_hook_env). Without --log-dir those files are in directories
// each run makes, shown as <TMPDIR>/ddprun-<what>-XXXXXX (the stacks hook's always).
struct RunExports {
  std::optional<std::string> log_dir;  // absolute, as in the agent's options
  int requeue = 0;
  bool hang = false;       // --hang-timeout
  bool heartbeat = false;  // heartbeat files: --hang-timeout or --max-restarts-without-progress
  bool python = false;     // stacks by faulthandler (agent::python_worker)
  std::vector<std::string> user_faulthandler;  // PYTHONFAULTHANDLER=... of the agent's environment, if any
  std::string python_path;                     // PYTHONPATH of the agent's environment, if any
  std::string error_dir, heartbeat_dir, stacks_dir;  // the private directories' names
};
RunExports run_exports(const agent::AgentOptions& ao, const std::vector<std::string>& agent_env);
// `w`'s variables as the run's first attempt exports them: the plan's and `x`'s.
std::map<std::string, std::string> exported_env(const core::Worker& w, const RunExports& x);

// The same bytes as the whole plan rendered at once: the text table, or the whole plan as JSON plus the
// CLI's fields dumped by core::dump_json with indent 2.
// `this_node`: this ddprun's own workers as bind_this_node bound them (they replace the derived
// ones, with their CPUs); empty: nothing bound. `exports`: what the run adds to each worker's
// variables (JSON only); null: the plan's variables only.
void write_plan_text(std::ostream& out, const core::Resolved& r, const core::PlanTable& table,
                     const std::vector<core::Worker>& this_node = {});
void write_plan_json(std::ostream& out, const core::Resolved& r, const core::PlanTable& table,
                     const std::vector<core::Worker>& this_node = {}, const RunExports* exports = nullptr);

// The startup table node rank 0 prints once the plan is agreed: one row per node (first and last
// rows only past `max_rows` nodes) with its host, ranks and the GPUs each rank sees, and node 0
// address.
std::string render_startup_table(const core::PlanTable& table, int attempt, std::size_t max_rows = 16);

// What each of one node's workers sees as CUDA_VISIBLE_DEVICES, as groups of consecutive ranks that
// see the same list: "0-3:0,1,2,3" (every worker sees the node's GPUs), "4:0,1 5:2,3" (slices of
// --gpus-per-proc 2); "-" when no worker has a GPU.
std::string gpus_seen(const std::vector<core::Worker>& node_workers);

// A dry run with --rdzv-iface or --local-addr: this node's address checked against the plan's hosts
// (core::advertised_address_warning); a run's node 0 checks every node's once they joined.
std::optional<std::string> dry_run_address_warning(const core::Resolved& r);

// The plan this node would run before the rendezvous replaces assumptions with facts. Building it
// checks every node's layout (O(nodes), no worker environments), in every mode.
core::PlanTable dry_run_table(const core::Resolved& r);

// --cpu-bind for the dry run: the workers this ddprun would spawn (this node's; in per-task mode its
// one task), derived from the table and bound on `topo` within `allowed`, as the run will bind them.
// Other nodes' workers stay unbound: their agents decide on their own machines. A batch script binds
// nothing (it is not a node that runs workers). Throws core::Error for an impossible request.
struct BoundNode {
  std::vector<core::Worker> workers;
  std::optional<std::string> warning;
};
BoundNode bind_this_node(const core::Resolved& r, const core::PlanTable& table, const core::Topology& topo,
                         const std::set<int>& allowed);

}  // namespace ddprun::launcher
