#pragma once
// Blocked get/wait/wait_any requests, indexed by the keys they wait on, so that a write wakes
// exactly the waiters it satisfies. Server thread only.
#include <cstddef>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "store/codec.hpp"
#include "store/store.hpp"

namespace ddprun::store::detail {

// One blocked request: its timer expires at the timeout, or is cancelled by the satisfying write.
struct Waiter {
  Waiter(const boost::asio::any_io_executor& ex, proto::Request q) : request(std::move(q)), timer(ex) {}
  proto::Request request;
  std::string fired_by;  // the key whose write satisfied it; empty on timeout
  // The answer, encoded when the write woke it; waiters woken by one write for the same value
  // share one buffer (a plan reaching 16k agents is encoded once). Empty on timeout.
  std::shared_ptr<const std::string> reply;
  boost::asio::steady_timer timer;
};
using WaiterPtr = std::shared_ptr<Waiter>;

class Waiters {
 public:
  std::size_t size() const { return count_; }
  void add(const WaiterPtr& w);
  // Takes a finished waiter off every list it is still on.
  void remove(const WaiterPtr& w);
  // After a write to `key`: wakes the waiters on it that `data` now satisfies.
  void notify(const std::string& key, const StoreData& data);

 private:
  // Sets, not lists: a waiter on several keys (the plan or a join error) leaves the others' sets
  // in O(1) when one fires; 16k agents waiting on one key made that O(N^2) with lists.
  std::unordered_map<std::string, std::unordered_set<WaiterPtr>> by_key_;
  std::size_t count_ = 0;
};

}  // namespace ddprun::store::detail
