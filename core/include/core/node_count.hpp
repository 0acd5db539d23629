#pragma once
// How many nodes a job has (issue 14, elastic jobs): MIN and MAX of --nnodes, the nodes that run
// workers at the start, and every agent, standbys included. Pure; config.cpp uses it.
#include <optional>
#include <string>

namespace ddprun::core {

// Elastic mode: restarts are allowed and the job can go on without a node, either because the world may
// shrink (MIN < MAX) or because standbys (agents beyond MAX) can take a lost node's place. Otherwise a
// lost node ends the job (fail-fast, the default).
bool is_elastic(int nnodes_min, int nnodes_max, int nagents, int max_restarts);

struct NodeCounts {
  int min = 1;     // the rendezvous' MIN
  int max = 1;     // the rendezvous' MAX
  int active = 1;  // nodes that run workers at the start (JobSpec::nnodes)
  int agents = 1;  // every agent: the active ones, then the standbys
  bool elastic = false;
  bool operator==(const NodeCounts&) const = default;
};

// An srun step of `n` nodes, one agent each. `nnodes`: --nnodes as given; `what` names the step in
// errors. Nodes beyond MAX are standbys in elastic mode and an error otherwise. Fail-fast keeps
// MIN = MAX = the active nodes, so its rendezvous never waits for nodes that cannot come.
NodeCounts step_counts(const std::optional<std::string>& nnodes, int n, int max_restarts,
                       const std::string& what);

// The `n` nodes of an allocation that self-launch would use (a batch script or salloc shell). Fail-fast
// runs on MAX of them at most; elastic mode keeps the rest as standbys.
NodeCounts batch_counts(const std::optional<std::string>& nnodes, int n, int max_restarts,
                        const std::string& what);

// Outside Slurm: --nnodes (1 when not given) and this agent's --node-rank. In elastic mode an agent at
// or above MAX is a standby; it only knows the agents up to itself.
NodeCounts outside_counts(const std::optional<std::string>& nnodes, std::optional<int> node_rank,
                          int max_restarts);

}  // namespace ddprun::core
