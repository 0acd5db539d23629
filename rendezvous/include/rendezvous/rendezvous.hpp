#pragma once
// The multi-node rendezvous (see docs/rendezvous.md). The node-rank-0 agent serves the store;
// every agent (node 0 included, over loopback) is a client of it.
//
//   Rendezvous r(opts);                   // node 0: starts serving
//   Joined j = r.join(me, make_plan);     // blocks until the plan (opaque bytes) is published
//   r.watch(on_abort);                    // liveness + abort push, from now on
//   ... run workers; on failure r.abort(cause) ...
//   r.exit_barrier();                     // on success, before leaving
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/defaults.hpp"
#include "core/elastic.hpp"
#include "core/failure.hpp"
#include "core/rank_order.hpp"
#include "rendezvous/error.hpp"
#include "store/auth.hpp"
#include "store/error.hpp"
#include "store/server.hpp"

namespace ddprun::rdzv {

// The store's authentication settings, by their short name inside this layer (RendezvousOptions).
namespace auth = store::auth;

struct JoinInfo {
  int node_rank = 0;
  std::string hostname;
  std::string addr;  // an address the other nodes can reach this node at
  int local_world_size = 1;
  std::vector<std::string> gpus;
  // Its SLURM_TOPOLOGY_ADDR (at most core::kMaxTopologyAddr + 1 bytes: a longer one is cut, and then
  // malformed), which node 0 orders the node ranks by under --rank-order topology; "" when unset.
  std::string topology = {};
  bool standby = false;  // set by node 0: a standby of this round (elastic, docs/elastic.md)
};
// Its JSON codec: every field required when reading, integers checked (a join record comes from
// another node).
void to_json(nlohmann::json& j, const JoinInfo& info);
void from_json(const nlohmann::json& j, JoinInfo& info);

// One agent's end-of-run record as node 0 gathers it (index in the plan, host, the record or
// nullopt when it did not come in time).
struct ResultRecord {
  int node_rank = 0;
  std::string hostname;
  std::optional<std::string> record;
};

// How the exit barrier ended (Rendezvous::exit_barrier).
struct ExitBarrierEnd {
  std::optional<core::Failure> root;  // nullopt: every node arrived, the job succeeded
  // The root is the abort the store holds (the job's root cause); false: this node's own judgement
  // (its node 0 lost, the barrier failed here), as node0_lost() says of the watch's cause.
  bool from_store = false;
};

struct RendezvousOptions {
  std::string host;        // node 0's address as the other agents reach it
  std::uint16_t port = 0;  // store port; on node 0 0 = ephemeral (then port() tells)
  // Where the store may be when `port` is not free on node 0 (another step's store, any
  // program): node 0 serves on the first of these it can bind; the other agents try `port` and
  // these in turn until a store of this run answers (a store of another run refuses them by run id,
  // so an agent never joins another run's store). Empty: `port` only.
  std::vector<std::uint16_t> fallback_ports;
  std::string run_id;
  int node_rank = 0;
  int nnodes_min = 1;
  int nnodes_max = 1;
  std::chrono::milliseconds join_timeout{core::kDefaultRdzvTimeout};
  std::chrono::milliseconds last_call{core::kDefaultLastCall};
  // Liveness (docs/rendezvous.md): the effective values grow with the node count, see
  // liveness_timing().
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds heartbeat_timeout{5000};
  int attempt = 0;
  // Optional: hostname of each node rank (e.g. from SLURM_JOB_NODELIST), so that a join timeout
  // on node 0 names the missing nodes by hostname. Empty or shorter: named by node rank.
  std::vector<std::string> expected_hosts;
  std::string listen_host = "0.0.0.0";  // node 0 only: where the store listens
  auth::Config auth;  // every agent of a run must resolve to the same mode (docs/security.md)
  // Node 0 only: where the store's "rejected peer" lines go; unset = stderr.
  std::function<void(const std::string& line)> log;
  // While join() waits, every progress_interval: a one-line message saying what it waits for
  // (on node 0, which nodes are still missing). Unset: silent.
  std::function<void(const std::string& message)> on_progress;
  std::chrono::milliseconds progress_interval{10000};
  // Elastic, any job with restarts (--max-restarts, docs/elastic.md): agents beyond nnodes_max are
  // standbys, and standbys count towards MIN; an agent that arrives after a round closed waits as a
  // standby for the next one; an agent that declines (a failed --health-check) is not waited for; a
  // round after a restart closes as soon as every survivor of the last one is back, and waits at most
  // rejoin_timeout for them.
  bool elastic = false;
  int nagents = 0;  // agents node 0 waits for in the first round, standbys included (0: nnodes_max)
  // nagents is every agent there can be (a Slurm step's nodes): no standby node 0 has not heard of may
  // still come, so a first round short of MIN fails as soon as every node is in or declined.
  bool agents_known = false;
  std::chrono::milliseconds rejoin_timeout{60000};
  // Called once when this agent arrived after a round had closed (elastic) and waits, as a standby, for
  // the next round or the job's end: a one-line message. Unset: silent.
  std::function<void(const std::string& message)> on_waiting;
  // Called when this agent learns that another agent could not start (fail_start, before the round
  // closed), before it says it has read that, and on the agent that failed before it publishes: each
  // then leaves with that agent's exit code, which a signal from srun --kill-on-bad-exit, sent once the
  // first of them exits, must not change (the launcher holds the stopping signals here).
  std::function<void()> on_start_failure;
  // --rank-order (docs/slurm.md, "Topology-aware node ranks"): topology lets node 0 order the plan's
  // node ranks by the join records' topology addresses, and prefer a lost node's switch or block when it
  // promotes a standby (arrange_round).
  core::RankOrder rank_order = core::RankOrder::slurm;
};

// Node 0 builds the plan from the nodes that joined, in the round's node order (their node rank, or
// --rank-order topology's order), active nodes first; the plan is an opaque payload here, published to
// every agent as it is.
using PlanFn = std::function<std::string(const std::vector<JoinInfo>& joined)>;

// What join() hands back: the published plan, and this node's place in the round.
struct Joined {
  std::string plan;
  int node_rank = 0;  // this node's rank among the joined nodes (0..nnodes-1, in node-rank order)
  int nnodes = 0;
  std::vector<core::Member> members;  // every agent of the round in node order, standbys last
  int attempt = 0;  // the round's attempt: an agent that came late joined a later one than it asked for
  // The job ended before this agent had a place in a round (it came late, or after the end): node 0's
  // exit code for the job. Nothing else is set then.
  std::optional<int> ended;
};

// The liveness timing of a round of `nnodes` (docs/rendezvous.md, "Liveness"): the heartbeat
// interval grows so that node 0 receives at most kMaxHeartbeatRate heartbeats a second; an
// agent silent for agent_timeout is lost; an agent that hears nothing from node 0 (no pong,
// no answer) for node0_timeout declares it lost.
struct LivenessTiming {
  std::chrono::milliseconds interval;
  std::chrono::milliseconds agent_timeout;
  std::chrono::milliseconds node0_timeout;
};
inline constexpr int kMaxHeartbeatRate = 4000;

class Rendezvous {
 public:
  // Node rank 0 starts serving the store here (throws Error when it cannot listen).
  explicit Rendezvous(RendezvousOptions o);
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  std::uint16_t port() const;
  // Whether this agent serves the store (node 0, node rank 0, or the survivor after a failover).
  bool serving() const;
  std::string endpoint() const;  // "host:port" as used in messages
  // Each node rank's host, as given (RendezvousOptions::expected_hosts).
  const std::vector<std::string>& expected_hosts() const;
  int attempt() const;
  // Node 0 only (else empty): the numeric addresses the agents connected from, each once; the
  // workers' store admits no other remote peer (docs/security.md).
  std::vector<std::string> peer_hosts() const;

  // Blocks until node 0 publishes the plan (or fails). On node 0 it runs the round:
  // waits for the nodes, calls make_plan with the joined nodes (sorted by node rank) and publishes
  // what it returns. Throws rdzv::Error (and
  // whatever make_plan throws, after publishing its message to the other agents).
  // The returned plan's node_rank is this node's rank in the plan.
  Joined join(const JoinInfo& me, const PlanFn& make_plan);

  // Heartbeats and the abort watch run on the agent's one connection from the agent's arrival in
  // join() on (node 0's lost-agent monitor from the plan on).
  // watch() installs the callback: it is called at most once per attempt, from a background
  // thread (or at once, here, for an abort that came before), with the published root cause, or
  // with a "lost node 0" cause when the store stops answering. On node 0 it also turns a lost agent
  // (connection dropped, heartbeats stopped) into a published abort. The callback should only hand the cause
  // over (set a flag, post to the supervisor); it may call abort() and aborted(), and should not destroy the
  // Rendezvous.
  void watch(std::function<void(const core::Failure&)> on_abort);

  // Publishes `cause` unless another abort was published first; returns the root cause that won
  // (the earlier one, or `cause`). Never throws: if the store is unreachable, returns `cause`.
  core::Failure abort(const core::Failure& cause);
  // The same, bounded: the store's answer is awaited at most `bound`, whatever node 0 does
  // (stopped, unreachable, slow). Past it this connection is closed (the watch then calls node 0
  // lost) and Error(timeout) thrown; Error too when the store cannot be reached at all. Beside a
  // waiting exit barrier it goes on a short connection of its own, and a failure closes the barrier's
  // connection too: a node that could not tell the others does not wait on for them.
  core::Failure abort(const core::Failure& cause, std::chrono::milliseconds bound);
  // Whether this attempt's watch called node 0 lost (the cause it handed over is then no
  // store's, but this node's own judgement).
  bool node0_lost() const;

  // The published root cause, if any (a quick check; no waiting).
  std::optional<core::Failure> aborted();

  // Start-up errors (docs/rendezvous.md): this agent cannot start (its own input, found before it could
  // join: no GPUs here for --nproc-per-node gpu, too few cores for --cpu-bind; or a failed --health-check,
  // also before a fail-fast job's restart round, not an elastic one's). Publishes `cause` as the
  // attempt's root cause, unless another agent's came first or the round closed without this
  // node, and returns once every agent of the job has read it (at most join_timeout), so that nobody
  // waits for this node; the cause that won. Node 0 serves its store for that long. Throws Error
  // when the store cannot be reached (connect, up to join_timeout).
  core::Failure fail_start(const core::Failure& cause);
  // Set when join() failed because an agent could not start (fail_start): that agent's cause, whose
  // exit_code every agent exits with. join() threw Error(join) naming it, after every agent read it.
  // Also set when node 0 failed a round for a declined node: its exit code.
  const std::optional<core::Failure>& start_failure() const;

  // Elastic: this agent will not join the next round (its --health-check failed): node 0 stops waiting
  // for it and goes on without it (a standby takes its place), or fails the round with `cause` when too
  // few are left. Unlike fail_start it ends nothing by itself. Returns once the round is decided: at
  // once when it goes on, else once every agent has read why it failed (at most the join timeout), as
  // fail_start does. Never throws.
  void decline(const core::Failure& cause);

  // Before the first round, while this agent's --health-check runs (agent other than node 0): connects
  // (waiting for node 0 as join does) and subscribes to the job's end, so that a check that outlasts the
  // job does not keep this agent waiting. interrupted() then tells, without waiting, whether it came (or
  // the store is gone): join() then returns Joined::ended. Throws what connecting throws.
  void wait_beside_check();
  bool interrupted();

  // Node 0 (the serving agent), when the job ends with `exit_code`: publishes it to the agents that
  // wait for a round (late standbys, agents in their health check), which leave with it, and keeps
  // serving until they have gone (at most the heartbeat timeout). After failovers it also leaves the code
  // in every earlier store host's store (a node 0 that was only stopped reads it when it resumes),
  // about a second each at most. Never throws.
  void finish(int exit_code);

  // Bounded barrier over the nodes of the plan. True when every node arrived; false on timeout or
  // abort. A node that arrives is leaving: its disconnection is no longer an error, and after a
  // successful barrier this node's watch stops. Node 0 returns only after the other nodes
  // have seen the barrier pass (bounded too), so it keeps serving until then.
  bool barrier(const std::string& name, std::chrono::milliseconds timeout);

  // The exit barrier (this node's workers all succeeded): the barrier "exit" without a time bound,
  // since the job's outcome is known only once every node got there or one of them failed. No root:
  // every node arrived, the job succeeded. Otherwise the job's root cause that ended the wait: the
  // published abort (a worker's failure, a lost agent, an agent stopped by a signal; from_store) or,
  // on an agent, its lost node 0. Liveness bounds it: a node that neither arrives nor fails is lost.
  // abort() from another thread meanwhile does not wait for this call's connection, and ends the
  // wait on every node (a stopping signal reaching the agent here). Never throws.
  ExitBarrierEnd exit_barrier();

  // Bytes this agent has received from node 0 on its connection so far.
  std::uint64_t bytes_received() const;

  // Restarts: stops the watch, moves to namespace "/attempt_<n+1>/" for a fresh join round.
  // `lost`: node ranks of the round that ended known to be gone (elastic: the round after it does not
  // wait for them).
  void next_attempt(const std::vector<int>& lost = {});

  // Elastic membership, kept here only (the launcher asks): the members of the round this agent joined,
  // in the round's node order (standbys last), from join() until next_attempt(); then that round is
  // previous_members(), with previous_lost() (node ranks there known to be gone, as next_attempt was
  // told), until the next call of next_attempt().
  const std::vector<core::Member>& members() const;
  const std::vector<core::Member>& previous_members() const;
  const std::vector<int>& previous_lost() const;

  // Elastic, after node 0 (node rank 0) was lost, on every survivor, after next_attempt: the
  // store moves to `addr`:`port`, served by the agent with node rank `host_rank` of the round that
  // ended (core::failover_host). That agent starts a fresh store; the others connect there.
  void fail_over(int host_rank, const std::string& addr, std::uint16_t port);
  int failovers() const;

  // Whether this agent was cut off during the attempt: it did not run (stopped, starved) for longer than
  // the others wait before they declare it lost (node 0: the node-0 timeout; any other agent: the agent
  // timeout, liveness_timing). The longest such gap; nullopt when there was none.
  std::optional<std::chrono::milliseconds> cut_off() const;
  // A cut-off agent that may go on as a standby: stops serving its store (if it is node 0) and uses the
  // store at `addr`:`port` from the next join on, where it comes late and waits for a round or the job's
  // end. `addr` empty: the store it uses now (an agent node 0 declared lost). False when no store of this
  // run answers there within the heartbeat timeout (nothing changes).
  bool follow(const std::string& addr, std::uint16_t port);
  // On the node 0 of a job that failed over: the job's exit code when the store host of its last round
  // left it here when the job ended (finish tells every earlier store host); nullopt otherwise.
  std::optional<int> outcome_left_here();

  // A standby's attempt (elastic): it waits, without bound, for the attempt's end. nullopt: every
  // active node finished (the exit barrier passed); otherwise the root cause or a lost node 0.
  // `stop` is polled about twice a second; when it returns true the wait ends with nullopt too.
  std::optional<core::Failure> standby(const std::function<bool()>& stop);

  // The end of an attempt (results.cpp): every agent publishes a compact record (opaque bytes) on its
  // connection (a short new one if that is gone), bounded by about 2 s whatever state node 0 is
  // in; false when
  // node 0 did not take it. Node 0 then gathers every joined agent's record, in plan order,
  // waiting at most `timeout`, and less once no other agent is connected any more (a record that
  // has not come by then never will); it does not wait for `lost` (a plan rank known to be gone).
  // Empty on any other agent, or before a join.
  bool publish_result(const std::string& record);
  std::vector<ResultRecord> gather_results(std::chrono::milliseconds timeout,
                                           std::optional<int> lost = std::nullopt);

  // `ddprun top`'s status (docs/observe.md): overwrites this node's record under `key` (outside the
  // attempts' namespaces). Never waits: on node 0 straight into its store; elsewhere a pipelined
  // set on the agent's one connection, skipped (false) while another call holds it (a barrier, an
  // abort) or node 0 has not answered the last few. Safe beside the other calls; never throws.
  bool publish_status(const std::string& key, const std::string& record);
  // --metrics-port (docs/observe.md): the record under `key` as this agent knows it, never waiting:
  // on node 0 what its store holds (every node's), elsewhere only what this agent last
  // published under that key. Safe from any thread; never throws.
  std::optional<std::string> local_status(const std::string& key);
  // `ddprun stacks` (docs/observe.md): the last request the store pushed to this agent's watch
  // (core::kStacksRequestKey, watched beside the abort while the workers run); nullopt before one.
  // Never waits, never reads the store. Safe from any thread.
  std::optional<std::string> stacks_request();
  // Writes such a key as publish_status does (never waits; false: not written), without keeping it;
  // beside a waiting exit barrier on a short connection of its own (bounded by 2 s for the connect and
  // 2 s for the answer), so that a node at the barrier still answers `ddprun stacks`.
  bool write_shared(const std::string& key, const std::string& value);

  // Node 0: after an abort, keeps serving until the other agents have disconnected (at most
  // `limit`), so that each of them reads the root cause instead of seeing a lost node 0. Agents
  // whose watch was lost or never came (stopped, gone) are not waited for.
  // The destructor calls it with heartbeat_timeout; destroy the Rendezvous rather than _exit.
  void drain(std::chrono::milliseconds limit);

 private:
  // The state (connections, threads, locks, the joined round) lives in rendezvous/src/rendezvous_impl.hpp.
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- pure helpers (unit-tested)

// Node 0's round: who of `joined` (sorted by node rank) runs workers, and in which node order.
// slurm: the first nnodes_max run, in node-rank order (standbys are the ranks beyond). topology: the
// first round as slurm, a later one keeps the last round's active nodes and fills a lost one's place
// with a standby of its switch or block first (core::choose_actives); the active nodes then follow
// core::topology_order with the node `store_rank` first, the standbys after them in node-rank order.
// `previous`: the last round's members (empty: the first round); `previous_addrs`: their topology
// addresses by node rank, as far as known (after a failover the new node 0 knows none of the lost ones).
std::vector<JoinInfo> arrange_round(std::vector<JoinInfo> joined, int nnodes_max, core::RankOrder order,
                                    int store_rank, const std::vector<core::Member>& previous,
                                    const std::map<int, std::string>& previous_addrs);

LivenessTiming liveness_timing(std::chrono::milliseconds heartbeat_interval,
                               std::chrono::milliseconds heartbeat_timeout, int nnodes);

// The hellos node 0's store refused, for its waiting and timeout lines: "refused 3 connections from
// 10.0.0.8 as node rank 1: authentication failed: wrong token (...)"; "" when none.
std::string describe_refusals(const std::vector<store::Refusal>& refusals);

// Describes the nodes of 0..nnodes_max-1 that did not join: "host-b (node rank 1), node rank 3".
std::string describe_missing(const std::vector<int>& joined_ranks, int nnodes_max,
                             const std::vector<std::string>& expected_hosts);

}  // namespace ddprun::rdzv
