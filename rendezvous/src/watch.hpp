#pragma once
// Every agent's liveness watch (docs/rendezvous.md, "Liveness"): a thread on the agent's one connection
// that sends the heartbeats, receives the pushed abort (and `ddprun stacks`' request, for the StatusBoard),
// calls node 0 lost when it falls silent or the connection goes, and this agent cut off when it did not
// run for longer than the others wait for it. It hands the cause it found to the abort callback, at most
// once an attempt. One lock (mu_) for the callback, the cause not yet handed over, the lost-node-0 cause and
// the turn clock; `watching_` is the stop flag the thread polls (an atomic: the thread never waits on it).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "core/failure.hpp"
#include "rendezvous/rendezvous.hpp"
#include "store/client.hpp"
#include "store_names.hpp"

namespace ddprun::rdzv {

class BarrierGate;
class StatusBoard;

// What one watch thread runs with, fixed from its start to its stop.
struct WatchRound {
  std::shared_ptr<TcpStore> conn;  // the agent's main connection
  LivenessTiming timing;
  bool serving = false;    // node 0: its store runs in this process, busy at worst, never silent-lost
  int node_rank = 0;       // this agent's, for a cut-off cause
  std::string endpoint;    // the store's "host:port", for a lost store's cause
  std::string store_host;  // the store's host, for that cause when the plan named no node 0 host
};

class Watch {
 public:
  using Callback = std::function<void(const core::Failure&)>;
  Watch(StatusBoard& status, const BarrierGate& gate) : status_(status), gate_(gate) {}
  ~Watch();
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;

  // A new attempt's watch: no callback, no cause yet; node 0's host as far as known.
  void rearm(std::string node0_host);
  void start(WatchRound round);
  // Ends the thread and waits for it (detaches it when called from it: from inside the callback).
  void stop();
  // A passed barrier: the others leaving is expected from now on; the thread ends at its next turn.
  void stop_watching() { watching_ = false; }
  bool watching() const { return watching_.load(); }
  bool fired() const;
  // Installs the callback; a cause that came before it is handed over at once, here.
  void install(Callback on_abort);
  // Hands `info` to the callback (or keeps it for install), once an attempt, while the watch runs.
  void fire(const core::Failure& info);
  void set_node0_host(std::string host);
  void set_self_host(std::string host);
  // The cause found and not handed to a callback (none installed yet): a standby's wait reads it.
  std::optional<core::Failure> pending() const;
  // Whether (and why) this attempt's watch called node 0 lost or this agent cut off: its own judgement.
  bool node0_lost() const;
  std::optional<core::Failure> lost_node0() const;
  // "lost the rendezvous store at ENDPOINT: WHY", naming node 0's host (else `store_host`).
  core::Failure lost_node0_failure(const std::string& endpoint, const std::string& store_host,
                                   const std::string& why) const;
  // The longest this attempt's watch did not turn (ms): how long this agent did not run. A watch that has
  // not turned since this agent runs again counts too.
  std::int64_t longest_gap_ms() const;
  // The round ended: its cause and lost node 0 are forgotten.
  void clear_round();

 private:
  void loop(const WatchRound& r);
  Millis turn();
  bool send_heartbeat(TcpStore& conn, const LivenessTiming& t, std::uint64_t& beats);
  std::vector<TcpStore::Event> events(TcpStore& conn, Millis wait, int wake_fd);
  bool node0_silent(const WatchRound& r, bool& fired);
  void fire_event(const std::string& value);
  void fire_cut_off(const WatchRound& r, Millis gap, Millis others_wait);
  void fire_lost_node0(const WatchRound& r, const std::string& why);
  void declare_lost(const core::Failure& info, TcpStore& conn);

  StatusBoard& status_;
  const BarrierGate& gate_;
  mutable std::mutex mu_;
  Callback on_abort_;
  std::optional<core::Failure> pending_;     // fired before install() gave a callback
  std::optional<core::Failure> lost_node0_;  // the lost-node-0 (or cut-off) cause this attempt fired
  bool fired_ = false;
  std::string node0_host_;  // for the lost-node-0 cause, once the plan named it
  std::string self_host_;   // this agent's host (its join record), for a cut-off cause
  // The watch loop's last turn (steady clock, ms; 0: not turning) and the longest it did not turn.
  std::int64_t last_turn_ms_ = 0;
  std::int64_t longest_gap_ms_ = 0;
  std::atomic<bool> watching_{false};
  int wake_fd_ = -1;  // an eventfd that ends the thread's wait
  std::thread thread_;
};

}  // namespace ddprun::rdzv
