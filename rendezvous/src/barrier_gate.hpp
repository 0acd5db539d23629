#pragma once
// Who holds the agent's main connection: a barrier's wait holds it for as long as the job runs elsewhere,
// so that the calls of other threads (abort, the status and stacks threads' try_write) go around it. One
// lock: abort() holds it while it uses the main connection (a barrier starting meanwhile waits for the
// abort, never the other way round), try_write takes it only when free, a barrier's wait sets `waiting`
// under it. The watch reads `waiting` without the lock (it must never wait on an abort's call).
#include <atomic>
#include <mutex>

namespace ddprun::rdzv {

class BarrierGate {
 public:
  std::unique_lock<std::mutex> hold() { return std::unique_lock(mu_); }
  std::unique_lock<std::mutex> try_hold() { return std::unique_lock(mu_, std::try_to_lock); }
  bool waiting() const { return waiting_.load(); }

  // From its construction to its end a barrier waits on the main connection.
  class Wait {
   public:
    explicit Wait(BarrierGate& gate) : gate_(gate) { gate_.set_waiting(true); }
    ~Wait() { gate_.set_waiting(false); }
    Wait(const Wait&) = delete;
    Wait& operator=(const Wait&) = delete;

   private:
    BarrierGate& gate_;
  };

  // The main thread's only (barrier, standby, the destructor): a barrier of this round passed, so node 0
  // does not drain for the others.
  bool passed = false;

 private:
  void set_waiting(bool on) {
    std::lock_guard lk(mu_);
    waiting_ = on;
  }

  std::mutex mu_;
  std::atomic<bool> waiting_{false};
};

}  // namespace ddprun::rdzv
