#pragma once
// The Rendezvous's state and workings behind its API (rendezvous.hpp): the connections and the join and
// round flow, composing the parts it is made of, each with its own header: membership.hpp (the rounds),
// barrier_gate.hpp (who holds the main connection), watch.hpp (the liveness watch thread),
// lost_monitor.hpp (node 0's monitor thread), status_board.hpp (what the status threads read).
// rendezvous.cpp forwards each public call here (waiting.cpp those it defines); the definitions are in
// the files named below.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "barrier_gate.hpp"
#include "lost_monitor.hpp"
#include "membership.hpp"
#include "rendezvous/plan_record.hpp"
#include "rendezvous/rendezvous.hpp"
#include "status_board.hpp"
#include "store/error.hpp"
#include "store_names.hpp"
#include "watch.hpp"

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
  bool node0_lost() const { return watch_.node0_lost(); }
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
  const std::vector<core::Member>& members() const { return round_.members; }
  const std::vector<core::Member>& previous_members() const { return round_.previous; }
  const std::vector<int>& previous_lost() const { return round_.previous_lost; }
  void fail_over(int host_rank, const std::string& addr, std::uint16_t port);
  int failovers() const { return round_.failovers; }
  std::optional<core::Failure> standby(const std::function<bool()>& stop);
  bool publish_result(const std::string& record);
  std::vector<ResultRecord> gather_results(std::chrono::milliseconds timeout, std::optional<int> lost);
  bool try_write(const std::string& key, const std::string& value, Rendezvous::WriteOptions how);
  std::optional<std::string> local_status(const std::string& key);
  std::optional<std::string> stacks_request() const { return status_.stacks_request(); }
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

  // liveness.cpp: the watch and node 0's monitor of this attempt, started and stopped
  void start_liveness();
  void start_monitor();
  void stop_watch();
  LivenessTiming timing() const;  // this round's (liveness_timing)

  RendezvousOptions opts_;
  // The parts (each file's header says which threads touch it, under which lock). Declared before the
  // store they serve beside: the store's thread reports to monitor_ until the server is gone.
  Membership round_;    // the main thread's only
  BarrierGate gate_;    // who holds the main connection
  StatusBoard status_;  // the status, stacks and metrics threads' side
  Watch watch_{status_, gate_};
  LostMonitor monitor_;  // node 0
  std::uint16_t port_ = 0;
  std::shared_ptr<StoreServer> server_;  // the store this agent serves (shared with status_)
  // The main connection; stays open. Replaced by the main thread, or by abort() under gate_'s lock.
  std::shared_ptr<TcpStore> client_;
  std::optional<core::Failure> start_failure_;
  bool check_watch_ = false;  // wait_beside_check subscribed this connection (a health check runs)
};

}  // namespace ddprun::rdzv
