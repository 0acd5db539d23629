#pragma once
// Elastic jobs (docs/elastic.md): the pure decisions after a node is lost. Who the survivors are,
// whether they may go on (MIN, the strict majority), who serves the store when node 0 is
// gone, and what changed between two rounds. Table-tested in tests/unit/core/test_elastic.cpp.
#include <optional>
#include <string>
#include <vector>

namespace ddprun::core {

// is_elastic (whether a job is elastic at all) lives with the node counts, core/node_count.hpp.

// One agent of a round, in the round's node order (its index is its node rank in the plan).
struct Member {
  int orig_rank = 0;  // the agent's own node rank (SLURM_NODEID / --node-rank), stable across rounds
  std::string host;
  bool standby = false;  // a standby: in the round, running no workers
  bool operator==(const Member&) const = default;
};

// What the survivors of a round do after `lost` (node ranks in that round) are gone.
struct AfterLoss {
  bool go_on = false;
  std::vector<Member> survivors;  // in node order
  std::string message;            // when !go_on: one line naming the lost nodes and why the job ends
};

// The rule (docs/elastic.md, "Failure bounds"): the survivors go on when the job is elastic (it has
// --max-restarts), at least MIN nodes remain, standbys included (`waiting`: agents that were no member of
// the round and wait for the next one, late standbys), and the survivors are a strict majority of the
// round's members (so that two halves of a partitioned job can never both go on; a waiting agent adds
// nothing to that side).
AfterLoss after_loss(const std::vector<Member>& members, const std::vector<int>& lost, int nnodes_min,
                     bool elastic, int waiting = 0);

// Why the job ends after an attempt that lost `lost`, if the survivors can tell alone: a job without
// restarts (not elastic) always says so, restarts left or not, so a lost node is never left
// unexplained; an elastic job only when a restart was due and the survivors are no strict majority
// while MIN of them remain. Fewer than MIN is for the next round to judge, where standbys that no
// survivor knows of (late ones) may wait; without a restart due the job ends for another reason
// (--max-restarts used up, a signal).
std::optional<std::string> loss_ends_job(const std::vector<Member>& members, const std::vector<int>& lost,
                                         int nnodes_min, bool elastic, bool restart_due);

// True when `present` of `previous` members form a strict majority.
bool has_majority(int present, int previous);

// The fewest nodes an elastic job of `agents` agents (actives and standbys) can go on with, losing
// them one at a time: each loss must leave at least `nnodes_min` and a strict majority of the round
// before. `agents` when it survives no loss at all (2 nodes: 1 left is not a majority of 2).
int shrink_floor(int agents, int nnodes_min);

// For an elastic job that survives no lost node (shrink_floor(agents, MIN) == agents): one line
// saying so and what to do, for the dry run and the start-up warning; nullopt when it survives one.
std::optional<std::string> survives_no_loss(int agents, int nnodes_min);

// The node rank (in `members`) that serves the store next when node 0 (node rank 0) is lost:
// the first survivor in node order; nullopt when none survives.
std::optional<int> failover_host(const std::vector<Member>& members, const std::vector<int>& lost);

// The store's port after `generation` failovers: each new store host serves on the next port, so a
// node 0 that is not dead after all (a partition) never collides with its successor. The workers'
// MASTER_PORT is skipped.
int failover_port(int base_port, int generation, int master_port);

// The difference between two rounds, by orig_rank.
struct MembershipChange {
  std::vector<Member> lost;      // members of `before` absent from `after`
  std::vector<Member> promoted;  // standbys of `before` active in `after`
  std::vector<Member> joined;    // members of `after` absent from `before`
  bool empty() const { return lost.empty() && promoted.empty() && joined.empty(); }
};
MembershipChange membership_change(const std::vector<Member>& before, const std::vector<Member>& after);

// "host-b (node rank 1), host-d (node rank 3)"; node ranks as in `members`' round.
std::string describe_members(const std::vector<Member>& members, const std::vector<Member>& which);

}  // namespace ddprun::core
