#pragma once
// The multi-node rendezvous (see docs/rendezvous.md). The node-rank-0 agent serves the store;
// every agent (the master included, over loopback) is a client of it.
//
//   Rendezvous r(opts);                   // master: starts serving
//   Joined j = r.join(me, make_plan);     // blocks until the plan (opaque bytes) is published
//   r.watch(on_abort);                    // liveness + abort push, from now on
//   ... run workers; on failure r.abort(cause) ...
//   r.exit_barrier();                     // on success, before leaving
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/defaults.hpp"
#include "core/elastic.hpp"
#include "core/failure.hpp"
#include "core/rank_order.hpp"
#include "rendezvous/error.hpp"
#include "store/auth.hpp"
#include "store/error.hpp"

namespace ddprun::store {
class StoreServer;
class TcpStore;
class PrefixStore;
class ServerStore;
}  // namespace ddprun::store

namespace ddprun::rdzv {

// The store types the rendezvous is built on, by their short names inside this layer.
using store::PrefixStore;
using store::ServerStore;
using store::StoreServer;
using store::TcpStore;
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
  bool spare = false;  // set by the master: a standby of this round (elastic, docs/elastic.md)
};
// Its JSON codec: every field required when reading, integers checked (a join record comes from
// another node).
void to_json(nlohmann::json& j, const JoinInfo& info);
void from_json(const nlohmann::json& j, JoinInfo& info);

// One agent's end-of-run record as the master gathers it (index in the plan, host, the record or
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
  // (its master lost, the barrier failed here), as master_lost() says of the watch's cause.
  bool from_store = false;
};

struct RendezvousOptions {
  std::string host;        // the master's address as the other agents reach it
  std::uint16_t port = 0;  // store port; on the master 0 = ephemeral (then port() tells)
  // Where the store may be when `port` is not free on the master's node (another step's store, any
  // program): the master serves on the first of these it can bind; the other agents try `port` and
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
  // on the master names the missing nodes by hostname. Empty or shorter: named by node rank.
  std::vector<std::string> expected_hosts;
  std::string listen_host = "0.0.0.0";  // master only: where the store listens
  auth::Config auth;  // every agent of a run must resolve to the same mode (docs/security.md)
  // Master only: where the store's "rejected peer" lines go; unset = stderr.
  std::function<void(const std::string& line)> log;
  // While join() waits, every progress_interval: a one-line message saying what it waits for
  // (on the master, which nodes are still missing). Unset: silent.
  std::function<void(const std::string& message)> on_progress;
  std::chrono::milliseconds progress_interval{10000};
  // Elastic (docs/elastic.md): agents beyond nnodes_max are standbys; a round after a restart closes
  // as soon as every survivor of the last one is back, and waits at most rejoin_timeout for them.
  bool elastic = false;
  int nagents = 0;  // agents the master waits for in the first round, standbys included (0: nnodes_max)
  std::chrono::milliseconds rejoin_timeout{60000};
  // Called when this agent learns that another agent could not start (fail_start, before the round
  // closed), before it says it has read that, and on the agent that failed before it publishes: each
  // then leaves with that agent's exit code, which a signal from srun --kill-on-bad-exit, sent once the
  // first of them exits, must not change (the launcher holds the stopping signals here).
  std::function<void()> on_start_failure;
  // --rank-order (docs/slurm.md, "Topology-aware node ranks"): topology lets the master order the plan's
  // node ranks by the join records' topology addresses, and prefer a lost node's switch or block when it
  // promotes a standby (arrange_round).
  core::RankOrder rank_order = core::RankOrder::slurm;
};

// The master builds the plan from the nodes that joined, in the round's node order (their node rank, or
// --rank-order topology's order), active nodes first; the plan is an opaque payload here, published to
// every agent as it is.
using PlanFn = std::function<std::string(const std::vector<JoinInfo>& joined)>;

// What join() hands back: the published plan, and this node's place in the round.
struct Joined {
  std::string plan;
  int node_rank = 0;  // this node's rank among the joined nodes (0..nnodes-1, in node-rank order)
  int nnodes = 0;
  std::vector<core::Member> members;  // every agent of the round in node order, standbys last
};

// The liveness timing of a round of `nnodes` (docs/rendezvous.md, "Liveness"): the heartbeat
// interval grows so that the master receives at most kMaxHeartbeatRate heartbeats a second; an
// agent silent for agent_timeout is lost; an agent that hears nothing from the master (no pong,
// no answer) for master_timeout declares it lost.
struct LivenessTiming {
  std::chrono::milliseconds interval;
  std::chrono::milliseconds agent_timeout;
  std::chrono::milliseconds master_timeout;
};
inline constexpr int kMaxHeartbeatRate = 4000;

class Rendezvous {
 public:
  // Node rank 0 starts serving the store here (throws Error when it cannot listen).
  explicit Rendezvous(RendezvousOptions o);
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  std::uint16_t port() const { return port_; }
  // Whether this agent serves the store (the master, node rank 0, or the survivor after a failover).
  bool serving() const { return server_ != nullptr; }
  std::string endpoint() const;  // "host:port" as used in messages
  // Each node rank's host, as given (RendezvousOptions::expected_hosts).
  const std::vector<std::string>& expected_hosts() const { return opts_.expected_hosts; }
  int attempt() const { return opts_.attempt; }
  // Master only (else empty): the numeric addresses the agents connected from, each once; the
  // workers' store admits no other remote peer (docs/security.md).
  std::vector<std::string> peer_hosts() const;

  // Blocks until the master publishes the plan (or fails). On the master it runs the round:
  // waits for the nodes, calls make_plan with the joined nodes (sorted by node rank) and publishes
  // what it returns. Throws rdzv::Error (and
  // whatever make_plan throws, after publishing its message to the other agents).
  // The returned plan's node_rank is this node's rank in the plan.
  Joined join(const JoinInfo& me, const PlanFn& make_plan);

  // Heartbeats and the abort watch run on the agent's one connection from the agent's arrival in
  // join() on (the master's lost-agent monitor from the plan on).
  // watch() installs the callback: it is called at most once per attempt, from a background
  // thread (or at once, here, for an abort that came before), with the published root cause, or
  // with a "lost master" cause when the store stops answering. On the master it also turns a lost agent
  // (connection dropped, heartbeats stopped) into a published abort. The callback should only hand the cause
  // over (set a flag, post to the supervisor); it may call abort() and aborted(), and should not destroy the
  // Rendezvous.
  void watch(std::function<void(const core::Failure&)> on_abort);

  // Publishes `cause` unless another abort was published first; returns the root cause that won
  // (the earlier one, or `cause`). Never throws: if the store is unreachable, returns `cause`.
  core::Failure abort(const core::Failure& cause);
  // The same, bounded: the store's answer is awaited at most `bound`, whatever the master does
  // (stopped, unreachable, slow). Past it this connection is closed (the watch then calls the master
  // lost) and Error(timeout) thrown; Error too when the store cannot be reached at all. Beside a
  // waiting exit barrier it goes on a short connection of its own, and a failure closes the barrier's
  // connection too: a node that could not tell the others does not wait on for them.
  core::Failure abort(const core::Failure& cause, std::chrono::milliseconds bound);
  // Whether this attempt's watch called the master lost (the cause it handed over is then no
  // store's, but this node's own judgement).
  bool master_lost() const { return master_lost_.load(); }

  // The published root cause, if any (a quick check; no waiting).
  std::optional<core::Failure> aborted();

  // Start-up errors (docs/rendezvous.md): this agent cannot start (its own input, found before it could
  // join: no GPUs here for --nproc-per-node gpu, too few cores for --cpu-bind; or a failed --health-check,
  // also before a fail-fast job's restart round, not an elastic one's). Publishes `cause` as the
  // attempt's root cause, unless another agent's came first or the round closed without this
  // node, and returns once every agent of the job has read it (at most join_timeout), so that nobody
  // waits for this node; the cause that won. The master serves its store for that long. Throws Error
  // when the store cannot be reached (connect, up to join_timeout).
  core::Failure fail_start(const core::Failure& cause);
  // Set when join() failed because an agent could not start (fail_start): that agent's cause, whose
  // exit_code every agent exits with. join() threw Error(join) naming it, after every agent read it.
  const std::optional<core::Failure>& start_failure() const { return start_failure_; }

  // Bounded barrier over the nodes of the plan. True when every node arrived; false on timeout or
  // abort. A node that arrives is leaving: its disconnection is no longer an error, and after a
  // successful barrier this node's watch stops. The master returns only after the other nodes
  // have seen the barrier pass (bounded too), so it keeps serving until then.
  bool barrier(const std::string& name, std::chrono::milliseconds timeout);

  // The exit barrier (this node's workers all succeeded): the barrier "exit" without a time bound,
  // since the job's outcome is known only once every node got there or one of them failed. No root:
  // every node arrived, the job succeeded. Otherwise the job's root cause that ended the wait: the
  // published abort (a worker's failure, a lost agent, an agent stopped by a signal; from_store) or,
  // on an agent, its lost master. Liveness bounds it: a node that neither arrives nor fails is lost.
  // abort() from another thread meanwhile does not wait for this call's connection, and ends the
  // wait on every node (a stopping signal reaching the agent here). Never throws.
  ExitBarrierEnd exit_barrier();

  // Bytes this agent has received from the master on its connection so far.
  std::uint64_t bytes_received() const;

  // Restarts: stops the watch, moves to namespace "/attempt_<n+1>/" for a fresh join round.
  // `lost`: node ranks of the round that ended known to be gone (elastic: the round after it does not
  // wait for them).
  void next_attempt(const std::vector<int>& lost = {});

  // Elastic, after the master (node rank 0) was lost, on every survivor, after next_attempt: the
  // store moves to `addr`:`port`, served by the agent with node rank `host_rank` of the round that
  // ended (core::failover_host). That agent starts a fresh store; the others connect there.
  void fail_over(int host_rank, const std::string& addr, std::uint16_t port);
  int failovers() const { return failovers_; }

  // A standby's attempt (elastic): it waits, without bound, for the attempt's end. nullopt: every
  // active node finished (the exit barrier passed); otherwise the root cause or a lost master.
  // `stop` is polled about twice a second; when it returns true the wait ends with nullopt too.
  std::optional<core::Failure> standby(const std::function<bool()>& stop);

  // The end of an attempt (results.cpp): every agent publishes a compact record (opaque bytes) on its
  // connection (a short new one if that is gone), bounded by about 2 s whatever state the master is
  // in; false when
  // the master did not take it. The master then gathers every joined agent's record, in plan order,
  // waiting at most `timeout`, and less once no other agent is connected any more (a record that
  // has not come by then never will); it does not wait for `lost` (a plan rank known to be gone).
  // Empty on any other agent, or before a join.
  bool publish_result(const std::string& record);
  std::vector<ResultRecord> gather_results(std::chrono::milliseconds timeout,
                                           std::optional<int> lost = std::nullopt);

  // `ddprun top`'s status (docs/observe.md): overwrites this node's record under `key` (outside the
  // attempts' namespaces). Never waits: on the master straight into its store; elsewhere a pipelined
  // set on the agent's one connection, skipped (false) while another call holds it (a barrier, an
  // abort) or the master has not answered the last few. Safe beside the other calls; never throws.
  bool publish_status(const std::string& key, const std::string& record);
  // --metrics-port (docs/observe.md): the record under `key` as this agent knows it, never waiting:
  // on the master what its store holds (every node's), elsewhere only what this agent last
  // published under that key. Safe from any thread; never throws.
  std::optional<std::string> local_status(const std::string& key);
  // `ddprun stacks` (docs/observe.md): the last request the store pushed to this agent's watch
  // (core::kStacksRequestKey, watched beside the abort while the workers run); nullopt before one.
  // Never waits, never reads the store. Safe from any thread.
  std::optional<std::string> stacks_request();
  // Writes such a key as publish_status does (never waits; false: not written), without keeping it.
  bool write_shared(const std::string& key, const std::string& value);

  // Master: after an abort, keeps serving until the other agents have disconnected (at most
  // `limit`), so that each of them reads the root cause instead of seeing a lost master. Agents
  // whose watch was lost or never came (stopped, gone) are not waited for.
  // The destructor calls it with heartbeat_timeout; destroy the Rendezvous rather than _exit.
  void drain(std::chrono::milliseconds limit);

 private:
  struct Participant {
    int orig_rank = 0;
    std::string hostname;
    bool spare = false;
  };

  // rendezvous.cpp: connections and the attempt's namespace
  void start_server(std::uint16_t port);
  void serve_first_free();
  std::shared_ptr<TcpStore> find_store();
  std::shared_ptr<TcpStore> connect_client(const std::string& label, std::chrono::milliseconds liveness,
                                           std::chrono::milliseconds connect_timeout,
                                           std::chrono::milliseconds op_timeout) const;
  void ensure_connected();
  PrefixStore store() const;
  std::string key_prefix() const;
  void linger(std::chrono::milliseconds limit);
  bool others_connected();
  std::string host_of(int orig_rank) const;

  // join.cpp
  void claim_node_rank(PrefixStore& s, int node_rank);
  bool wait_for_plan(PrefixStore& s, std::chrono::steady_clock::time_point start);
  void run_master_round(const PlanFn& make_plan);
  void wait_for_arrivals(PrefixStore& s);
  std::vector<int> wait_for_survivors(PrefixStore& s);  // the node ranks that joined
  bool elastic_round() const;
  bool start_errors_end_round() const;
  std::vector<int> joined_ranks(PrefixStore& s) const;
  std::vector<JoinInfo> read_join_records(PrefixStore& s, const std::vector<int>& ranks);
  [[noreturn]] void fail_join(const std::string& message);
  [[noreturn]] void leave_after_start_failure(PrefixStore& s);
  void await_start_failure_read(PrefixStore& s);
  Joined read_plan(const std::string& published);

  // barrier.cpp
  enum class BarrierEnd { passed, aborted, timed_out, failed };
  BarrierEnd wait_barrier(const std::string& name, std::chrono::steady_clock::time_point deadline,
                          std::string& error);
  void arrive_at_barrier(PrefixStore& s, const std::string& name, int n);
  void ack_barrier(PrefixStore& s, const std::string& name);
  core::Failure abort_beside_barrier(const std::string& encoded);
  void end_barrier_wait();
  core::Failure lost_master_failure(const std::string& why);

  // liveness.cpp
  void start_liveness();
  void start_monitor();
  void watch_loop(std::shared_ptr<TcpStore> conn, const LivenessTiming& t);
  void fire_lost_master(const std::string& why, TcpStore* conn = nullptr);
  void fire_event(const std::string& value);
  // The watch's event of index 1: `ddprun stacks`' request, kept for stacks_request().
  void keep_stacks_request(std::string value);
  void stop_watch();
  void fire(const core::Failure& info);
  void monitor_loop(int attempt);
  void publish_missing_watches(PrefixStore& s, int attempt);
  void publish_lost(PrefixStore& s, int orig, const std::string& reason);
  void on_lost(const std::string& label, const std::string& reason);

  RendezvousOptions opts_;
  std::uint16_t port_ = 0;
  std::unique_ptr<StoreServer> server_;
  std::shared_ptr<TcpStore> client_;  // the main connection; stays open

  // The joined round.
  std::vector<Participant> participants_;  // index = node rank in the plan
  int plan_node_rank_ = -1;
  std::chrono::steady_clock::time_point plan_published_{};  // master: when the plan went out
  bool joined_ = false;
  bool barrier_passed_ = false;
  // A barrier's wait holds the main connection: abort() then goes around it (abort_beside_barrier).
  // Set and read under barrier_mu_ by abort(); the watch reads it to end a wait on a lost master.
  std::mutex barrier_mu_;
  std::mutex status_mu_;
  std::map<std::string, std::string> published_status_;  // by key: this agent's last (--metrics-port)
  std::atomic<bool> barrier_waiting_{false};
  // Elastic: the last round's members, and who of them is known to be gone (node ranks there).
  std::vector<core::Member> previous_;
  std::set<int> previous_lost_;
  std::set<int> dropped_;                      // master: orig ranks lost during this attempt
  std::map<int, std::string> topology_addrs_;  // master: the last round's topology addresses by orig rank
  int failovers_ = 0;
  std::optional<core::Failure> start_failure_;

  // Watch state.
  std::mutex cb_mu_;
  std::mutex stacks_mu_;
  std::optional<std::string> stacks_request_;  // under stacks_mu_
  std::function<void(const core::Failure&)> on_abort_;
  std::optional<core::Failure> pending_;      // fired before watch() installed a callback
  std::string master_host_;                   // for the lost-master cause, once the plan named it
  std::optional<core::Failure> lost_master_;  // the lost-master cause this attempt's watch fired
  std::atomic<bool> fired_{false};
  std::atomic<bool> master_lost_{false};  // this attempt's watch declared the master lost
  std::atomic<bool> watching_{false};
  int wake_fd_ = -1;  // an eventfd that ends the watch thread's wait
  std::thread watch_thread_;

  // Master: lost-peer reports from the server thread, handled on the monitor thread.
  std::mutex lost_mu_;
  std::condition_variable lost_cv_;
  std::deque<std::pair<std::string, std::string>> lost_;
  std::set<std::string> lost_labels_;  // this attempt's lost or missing connections
  bool monitor_stop_ = false;
  std::thread monitor_thread_;  // talks to the store in-process (StoreServer::apply)
};

// ---- pure helpers (unit-tested)

// The master's round: who of `joined` (sorted by node rank) runs workers, and in which node order.
// slurm: the first nnodes_max run, in node-rank order (standbys are the ranks beyond). topology: the
// first round as slurm, a later one keeps the last round's active nodes and fills a lost one's place
// with a standby of its switch or block first (core::choose_actives); the active nodes then follow
// core::topology_order with the node `store_rank` first, the standbys after them in node-rank order.
// `previous`: the last round's members (empty: the first round); `previous_addrs`: their topology
// addresses by node rank, as far as known (after a failover the new master knows none of the lost ones).
std::vector<JoinInfo> arrange_round(std::vector<JoinInfo> joined, int nnodes_max, core::RankOrder order,
                                    int store_rank, const std::vector<core::Member>& previous,
                                    const std::map<int, std::string>& previous_addrs);

LivenessTiming liveness_timing(std::chrono::milliseconds heartbeat_interval,
                               std::chrono::milliseconds heartbeat_timeout, int nnodes);

// Describes the nodes of 0..nnodes_max-1 that did not join: "host-b (node rank 1), node rank 3".
std::string describe_missing(const std::vector<int>& joined_ranks, int nnodes_max,
                             const std::vector<std::string>& expected_hosts);

}  // namespace ddprun::rdzv
