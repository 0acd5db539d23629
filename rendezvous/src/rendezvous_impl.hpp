#pragma once
// The Rendezvous's state and workings behind its API (rendezvous.hpp): the connections, the watch and
// monitor threads, their locks and flags. rendezvous.cpp forwards each public call here (waiting.cpp
// those it defines); the definitions are in the files named below.
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

#include "rendezvous/plan_record.hpp"
#include "rendezvous/rendezvous.hpp"
#include "store/error.hpp"
#include "store_names.hpp"

namespace ddprun::rdzv {

class Rendezvous::Impl {
 public:
  // The same calls as Rendezvous's, documented there.
  explicit Impl(RendezvousOptions o);
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  std::uint16_t port() const { return port_; }
  bool serving() const { return server_ != nullptr; }
  std::string endpoint() const;  // "host:port" as used in messages
  const std::vector<std::string>& expected_hosts() const { return opts_.expected_hosts; }
  int attempt() const { return opts_.attempt; }
  std::vector<std::string> peer_hosts() const;
  Joined join(const JoinInfo& me, const PlanFn& make_plan);
  void watch(std::function<void(const core::Failure&)> on_abort);
  core::Failure abort(const core::Failure& cause);
  core::Failure abort(const core::Failure& cause, std::chrono::milliseconds bound);
  bool node0_lost() const { return node0_lost_.load(); }
  std::optional<core::Failure> aborted();
  core::Failure fail_start(const core::Failure& cause);
  const std::optional<core::Failure>& start_failure() const { return start_failure_; }
  void decline(const core::Failure& cause);
  void wait_beside_check();
  bool interrupted();
  void finish(int exit_code);
  std::optional<std::chrono::milliseconds> cut_off() const;
  bool follow(const std::string& addr, std::uint16_t port);
  std::optional<int> outcome_left_here();
  bool barrier(const std::string& name, std::chrono::milliseconds timeout);
  ExitBarrierEnd exit_barrier();
  std::uint64_t bytes_received() const;
  void next_attempt(const std::vector<int>& lost);
  // Forgets the round that ended (members, this agent's place in it, its flags and lost peers):
  // next_attempt and follow, before the next join.
  void clear_round();
  const std::vector<core::Member>& members() const { return members_; }
  const std::vector<core::Member>& previous_members() const { return previous_; }
  const std::vector<int>& previous_lost() const { return previous_lost_; }
  void fail_over(int host_rank, const std::string& addr, std::uint16_t port);
  int failovers() const { return failovers_; }
  std::optional<core::Failure> standby(const std::function<bool()>& stop);
  bool publish_result(const std::string& record);
  std::vector<ResultRecord> gather_results(std::chrono::milliseconds timeout, std::optional<int> lost);
  bool publish_status(const std::string& key, const std::string& record);
  std::optional<std::string> local_status(const std::string& key);
  std::optional<std::string> stacks_request();
  bool write_shared(const std::string& key, const std::string& value);
  void drain(std::chrono::milliseconds limit);

 private:
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
  void arrive(PrefixStore& s, const JoinInfo& me);
  void claim_node_rank(PrefixStore& s, int node_rank);
  enum class PlanWait { plan, over, timed_out };
  PlanWait wait_for_plan(PrefixStore& s, std::chrono::steady_clock::time_point start, bool waiting);
  void run_node0_round(const PlanFn& make_plan);
  store::Error no_plan_error() const;
  void wait_as_standby(bool first);
  // round.cpp: whom node 0's round waits for
  void wait_first_round(PrefixStore& s);
  std::string refusals() const;  // node 0: describe_refusals of its store's refusals, "" elsewhere
  std::vector<int> wait_for_survivors(PrefixStore& s);  // the node ranks that joined
  bool elastic_round() const;
  bool start_errors_end_round() const;
  std::vector<int> joined_ranks(PrefixStore& s) const;
  std::vector<JoinInfo> read_join_records(PrefixStore& s, const std::vector<int>& ranks);
  [[noreturn]] void fail_join(const std::string& message, int exit_code = 1);
  [[noreturn]] void leave_after_start_failure(PrefixStore& s);
  void await_start_failure_read(PrefixStore& s);
  void await_reads(PrefixStore& s, int agents, bool count);
  PlanRecord decode_published(const std::string& published) const;
  Joined read_plan(PlanRecord rec);

  // waiting.cpp: agents that wait for a round (late standbys, health checks), declines, the job's end
  PrefixStore job_store() const;
  void adopt_current_attempt();
  void wait_for_next_round();
  std::optional<int> job_over();
  std::set<int> declined_ranks(PrefixStore& s) const;
  std::optional<core::Failure> declined_cause(PrefixStore& s, const std::vector<int>& ranks) const;
  [[noreturn]] void fail_short(PrefixStore& s, int in);
  bool waiting_connected();

  // barrier.cpp
  enum class BarrierEnd { passed, aborted, timed_out, failed };
  BarrierEnd wait_barrier(const std::string& name, std::chrono::steady_clock::time_point deadline,
                          std::string& error);
  void arrive_at_barrier(PrefixStore& s, const std::string& name, int n);
  void ack_barrier(PrefixStore& s, const std::string& name);
  core::Failure abort_beside_barrier(const std::string& encoded);
  void end_barrier_wait();
  core::Failure lost_node0_failure(const std::string& why);

  // liveness.cpp
  void start_liveness();
  void start_monitor();
  void watch_loop(const std::shared_ptr<TcpStore>& conn, const LivenessTiming& t);
  Millis watch_turn();
  bool send_heartbeat(TcpStore& conn, const LivenessTiming& t, std::uint64_t& beats);
  bool node0_lost(TcpStore& conn, const LivenessTiming& t, bool& fired);
  void fire_lost_node0(const std::string& why, TcpStore* conn = nullptr);
  void fire_cut_off(Millis gap, Millis others_wait, TcpStore* conn);
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
  std::vector<core::Member> members_;  // index = node rank in the plan
  int plan_node_rank_ = -1;
  std::chrono::steady_clock::time_point plan_published_{};  // node 0: when the plan went out
  bool joined_ = false;
  bool barrier_passed_ = false;
  // A barrier's wait holds the main connection: abort() then goes around it (abort_beside_barrier).
  // Set and read under barrier_mu_ by abort(); the watch reads it to end a wait on a lost node 0.
  std::mutex barrier_mu_;
  std::mutex status_mu_;
  std::map<std::string, std::string> published_status_;  // by key: this agent's last (--metrics-port)
  std::atomic<bool> barrier_waiting_{false};
  // Elastic: the last round's members, and who of them is known to be gone (node ranks there). The
  // launcher asks here (members(), previous_members(), previous_lost()) rather than keep its own.
  std::vector<core::Member> previous_;
  std::vector<int> previous_lost_;
  std::set<int> dropped_;                      // node 0: orig ranks lost during this attempt
  std::map<int, std::string> topology_addrs_;  // node 0: the last round's topology addresses by orig rank
  int failovers_ = 0;
  std::vector<std::pair<std::string, std::uint16_t>> past_stores_;  // endpoints before each failover
  std::optional<core::Failure> start_failure_;
  bool check_watch_ = false;  // wait_beside_check subscribed this connection (a health check runs)

  // Watch state.
  std::mutex cb_mu_;
  std::mutex stacks_mu_;
  std::optional<std::string> stacks_request_;  // under stacks_mu_
  std::function<void(const core::Failure&)> on_abort_;
  std::optional<core::Failure> pending_;     // fired before watch() installed a callback
  std::string node0_host_;                   // for the lost-node-0 cause, once the plan named it
  std::string self_host_;                    // this agent's host (its join record), for a cut-off cause
  std::optional<core::Failure> lost_node0_;  // the lost-node-0 cause this attempt's watch fired
  std::atomic<bool> fired_{false};
  std::atomic<bool> node0_lost_{false};  // this attempt's watch declared node 0 lost
  std::atomic<bool> watching_{false};
  int wake_fd_ = -1;  // an eventfd that ends the watch thread's wait
  // The watch loop's last turn (steady clock, ms) and the longest it did not turn this attempt: how long
  // this agent did not run (stopped, starved), which tells whether the others have declared it lost.
  std::atomic<std::int64_t> last_turn_ms_{0};
  std::atomic<std::int64_t> longest_gap_ms_{0};
  std::thread watch_thread_;

  // Node 0: lost-peer reports from the server thread, handled on the monitor thread.
  std::mutex lost_mu_;
  std::condition_variable lost_cv_;
  std::deque<std::pair<std::string, std::string>> lost_;
  std::set<std::string> lost_labels_;  // this attempt's lost or missing connections
  bool monitor_stop_ = false;
  std::thread monitor_thread_;  // talks to the store in-process (StoreServer::apply)
};

}  // namespace ddprun::rdzv
