#pragma once
// Node 0's lost-agent monitor (docs/rendezvous.md, "Liveness"): the store's thread reports a lost
// connection (on_lost, it only queues); the monitor's thread turns a lost member of the round into the
// published abort, in-process, and, once the watches are due, a member that never opened its watch too.
// One lock (mu_) for the queue, the lost labels, the dropped ranks and the stop flag; the main thread reads
// the labels (drain, finish) and the dropped ranks (the next elastic round) under it.
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/elastic.hpp"
#include "store_names.hpp"

namespace ddprun::rdzv {

// What one monitor thread runs with, fixed from its start to its stop.
struct MonitorRound {
  int attempt = 0;
  int node_rank = 0;                                  // node 0's own (its agent is never lost to itself)
  std::vector<core::Member> members;                  // the round's, in plan order
  std::chrono::steady_clock::time_point watches_due;  // the plan's publication + the heartbeat timeout
  Millis heartbeat_timeout{0};
};

class LostMonitor {
 public:
  LostMonitor() = default;
  ~LostMonitor() { stop(); }
  LostMonitor(const LostMonitor&) = delete;
  LostMonitor& operator=(const LostMonitor&) = delete;

  // Starts the thread unless it runs; `server` outlives it (stop() before the server goes).
  void start(StoreServer& server, MonitorRound round);
  void stop();
  // The store's thread: a connection labelled `label` was lost. Queues only.
  void on_lost(const std::string& label, const std::string& reason);
  // This attempt's lost or missing connections (kept past the thread's end, for drain and finish).
  std::set<std::string> lost_labels() const;
  void forget_lost_labels();
  // Node ranks lost during this attempt: the next elastic round does not wait for them.
  std::set<int> dropped() const;
  void forget_dropped();

 private:
  void loop(StoreServer& server, const MonitorRound& r);
  void publish_missing_watches(PrefixStore& s, StoreServer& server, const MonitorRound& r);
  void publish_lost(PrefixStore& s, const MonitorRound& r, int orig, const std::string& reason);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::string, std::string>> lost_;  // (label, reason) not yet handled
  std::set<std::string> lost_labels_;
  std::set<int> dropped_;
  bool stop_ = false;
  std::thread thread_;  // talks to the store in-process (StoreServer::apply)
};

}  // namespace ddprun::rdzv
