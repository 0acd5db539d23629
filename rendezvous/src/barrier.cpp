// The bounded barrier over the nodes of the plan (the exit barrier on success).
#include "deadline.hpp"
#include "keys.hpp"
#include "rendezvous/rendezvous.hpp"
#include "store/store.hpp"

namespace ddprun::rdzv {

using detail::Clock;
using detail::left_until;

bool Rendezvous::barrier(const std::string& name, Millis timeout) {
  const auto deadline = Clock::now() + timeout;
  const int n = joined_ ? static_cast<int>(participants_.size()) : opts_.nnodes_max;
  bool ok = false;
  try {
    ensure_connected();
    PrefixStore s = store();
    s.set(keys::left(opts_.node_rank), "1");
    if (s.add(keys::barrier_count(name), 1) >= n) s.set(keys::barrier_done(name), "1");
    const auto got = s.wait_any({keys::barrier_done(name), keys::kAbort}, left_until(deadline));
    ok = got && *got == 0;
    // Leaving: from here on the master closing the store is expected, not a lost master. This must
    // happen before the ack, which lets the master stop serving.
    if (ok) watching_ = false;
    if (ok && !server_) {
      // The barrier has passed: the ack only lets the master stop serving sooner. A master that
      // stopped first (its bounded wait for the acks ended) is no failure of this node.
      try {
        s.set(keys::barrier_ack(name, opts_.node_rank), "1");
      } catch (const Error&) {
      }
    } else if (ok) {
      // Keep serving until every other node has seen the barrier pass (bounded). Every node arrived,
      // so the barrier has passed even when some acks do not come in time.
      std::vector<std::string> acks;
      for (const auto& p : participants_) {
        if (p.orig_rank != opts_.node_rank) acks.push_back(keys::barrier_ack(name, p.orig_rank));
      }
      try {
        if (!acks.empty()) s.wait(acks, std::min(left_until(deadline) + Millis{1000}, Millis{10000}));
      } catch (const Error&) {
      }
    }
  } catch (const Error&) {
    ok = false;
  }
  if (ok) {
    barrier_passed_ = true;
    stop_watch();
  }
  return ok;
}

}  // namespace ddprun::rdzv
