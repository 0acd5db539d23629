#pragma once
// What Slurm tells ddprun, read from an environment snapshot (pure; no getenv inside).
// Step variables win over job variables: inside srun, SLURM_NODELIST is still the whole allocation.
#include <array>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/enum_names.hpp"
#include "core/error.hpp"

namespace ddprun::core {

using EnvSnapshot = std::map<std::string, std::string>;

enum class SlurmContext {
  none,   // not under Slurm
  batch,  // SLURM_JOB_ID without SLURM_STEP_ID: a batch script or an salloc shell (looks like a step, is not)
  step,   // inside an srun step
};
inline constexpr std::array<EnumName<SlurmContext>, 3> kSlurmContextNames{
    {{SlurmContext::none, "none"}, {SlurmContext::batch, "batch"}, {SlurmContext::step, "step"}}};
const char* to_string(SlurmContext c);

// A value with the name of the variable it came from, for error messages.
template <typename T>
struct FromVar {
  T value{};
  std::string var;
};

struct SlurmEnv {
  SlurmContext context = SlurmContext::none;
  std::optional<std::string> job_id;
  std::optional<std::string> step_id;
  std::optional<FromVar<std::string>> nodelist;        // step first, then job
  std::optional<FromVar<int>> num_nodes;               // step first, then job
  std::optional<FromVar<int>> num_tasks;               // step first, then job
  std::optional<FromVar<std::string>> tasks_per_node;  // step first, then job
  std::optional<int> node_id;                          // SLURM_NODEID (step-relative)
  std::optional<int> proc_id;                          // SLURM_PROCID
  std::optional<int> local_id;                         // SLURM_LOCALID
  std::optional<std::string> nodename;                 // SLURMD_NODENAME
  std::optional<int> cpus_per_task;                    // SLURM_CPUS_PER_TASK
  std::optional<int> cpus_on_node;                     // SLURM_CPUS_ON_NODE: the job's CPUs here
  std::optional<std::string> het_size;                 // SLURM_HET_SIZE: a heterogeneous job's components
  // A heterogeneous job (SLURM_HET_SIZE >= 2): each component's nodes, SLURM_JOB_NODELIST_HET_GROUP_<i>
  // (empty when not every one is set). A batch shell's own variables describe component 0 alone.
  std::vector<std::string> het_nodelists;
  std::optional<FromVar<std::string>> gpus;         // SLURM_STEP_GPUS, else SLURM_JOB_GPUS
  std::optional<std::string> cuda_visible_devices;  // CUDA_VISIBLE_DEVICES; set and empty: no GPUs
  std::optional<int> restart_count;                 // SLURM_RESTART_COUNT
  std::optional<std::string> resv_ports;            // SLURM_STEP_RESV_PORTS (srun --resv-ports)
  // SLURM_TOPOLOGY_ADDR: this task's own node's place among the switches ("s0.s3.node7") or blocks
  // ("b3.node17"); the node's name alone without a topology plugin. Each task sees only its own.
  std::optional<std::string> topology_addr;
};

// Reads the variables; throws Error naming the variable when a number is malformed.
SlurmEnv read_slurm_env(const EnvSnapshot& env);

// The step (or allocation) layout, expanded and cross-checked.
struct SlurmLayout {
  std::vector<std::string> hosts;   // one per node, in node-id order
  std::vector<int> tasks_per_node;  // one per node (empty when Slurm did not say)
  int num_tasks = 0;                // 0 when Slurm did not say
};

// Expands the nodelist and tasks-per-node and checks that the counts agree with each other and that
// SLURM_NODEID lies inside the step. Throws Error naming the disagreeing variables. A heterogeneous job
// (het_nodelists): a batch shell's allocation is every component's nodes, component after component; a
// step over several components numbers its nodes (SLURM_NODEID) the same way, component after component,
// although its SLURM_STEP_NODELIST is sorted: the hosts come in that order (het_node_order).
SlurmLayout slurm_layout(const SlurmEnv& s);

// A step's hosts in SLURM_NODEID order when it spans several components of a heterogeneous job:
// component after component, each in its own order; nullopt when the step lies within one component (its
// own order holds) or has a host of no component. Pure.
std::optional<std::vector<std::string>> het_node_order(
    const std::vector<std::string>& step_hosts, const std::vector<std::vector<std::string>>& components);

// GPU ids visible to this node/task: CUDA_VISIBLE_DEVICES, else Slurm's GPU list, else `probed`.
std::vector<std::string> visible_gpus(const SlurmEnv& s, const std::vector<std::string>& probed);

// Strict integer parse for a named setting; throws Error "NAME='v' is not a whole number ...".
int parse_int(const std::string& name, const std::string& value, int min_value);

// Comma-separated list, empty items dropped.
std::vector<std::string> split_list(const std::string& s, char sep = ',');

// The munged socket Slurm itself uses, from the text of a slurm.conf: `socket=PATH` in `AuthInfo=...`
// (the last AuthInfo wins, as in Slurm); nullopt when none is named (Slurm then uses munged's default).
// Keys are case-insensitive, `#` starts a comment, a line may hold several KEY=VALUE, a value may be quoted.
std::optional<std::string> slurm_conf_munge_socket(std::string_view conf);

}  // namespace ddprun::core
