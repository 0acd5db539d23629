// The bounded barrier over the nodes of the plan (the exit barrier on success).
#include "deadline.hpp"
#include "keys.hpp"
#include "rendezvous/rendezvous.hpp"
#include "store/store.hpp"

namespace ddprun::rdzv {

using detail::Clock;
using detail::left_until;

// This node is at barrier `name` of `n` nodes, and leaving: its disconnection is no failure from now on.
void Rendezvous::arrive_at_barrier(PrefixStore& s, const std::string& name, int n) {
  s.set(keys::left(opts_.node_rank), "1");
  if (s.add(keys::barrier_count(name), 1) >= n) s.set(keys::barrier_done(name), "1");
}

// Barrier `name` has passed (on an agent, not the master): from here on the master closing the store is
// expected, not a lost master, so the watch stops before the ack, which lets the master stop serving.
// The ack only lets it stop sooner: a master that stopped first (its bounded wait for the acks ended) is
// no failure of this node.
void Rendezvous::ack_barrier(PrefixStore& s, const std::string& name) {
  watching_ = false;
  try {
    s.set(keys::barrier_ack(name, opts_.node_rank), "1");
  } catch (const Error&) {
  }
}

bool Rendezvous::barrier(const std::string& name, Millis timeout) {
  const auto deadline = Clock::now() + timeout;
  const int n = joined_ ? static_cast<int>(participants_.size()) : opts_.nnodes_max;
  bool ok = false;
  try {
    ensure_connected();
    PrefixStore s = store();
    arrive_at_barrier(s, name, n);
    const auto got = s.wait_any({keys::barrier_done(name), keys::kAbort}, left_until(deadline));
    ok = got && *got == 0;
    if (ok && !server_) {
      ack_barrier(s, name);
    } else if (ok) {
      watching_ = false;  // the others leaving now is expected
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
