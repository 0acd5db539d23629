// The barrier over the nodes of the plan: bounded, or the exit barrier, which waits for the job's outcome.
#include <utility>

#include <fmt/core.h>

#include "deadline.hpp"
#include "keys.hpp"
#include "rendezvous_impl.hpp"
#include "store/client.hpp"
#include "store/server.hpp"
#include "store/store.hpp"

namespace ddprun::rdzv {

using detail::Clock;
using detail::left_until;

namespace {
constexpr Millis kBesideTimeout{5000};  // an abort beside a waiting barrier: connect and answer, each
}  // namespace

// This node is at barrier `name` of `n` nodes, and leaving: its disconnection is no failure from now on.
void Rendezvous::Impl::arrive_at_barrier(PrefixStore& s, const std::string& name, int n) {
  s.set(keys::left(opts_.node_rank), "1");
  if (s.add(keys::barrier_count(name), 1) >= n) s.set(keys::barrier_done(name), "1");
}

// Barrier `name` has passed (on an agent, not node 0): from here on node 0 closing the store is
// expected, not a lost node 0, so the watch stops before the ack, which lets node 0 stop serving.
// The ack only lets it stop sooner: a node 0 that stopped first (its bounded wait for the acks ended) is
// no failure of this node.
void Rendezvous::Impl::ack_barrier(PrefixStore& s, const std::string& name) {
  watch_.stop_watching();
  try {
    s.set(keys::barrier_ack(name, opts_.node_rank), "1");
  } catch (const store::Error&) {
  }
}

Rendezvous::Impl::BarrierEnd Rendezvous::Impl::wait_barrier(const std::string& name,
                                                            Clock::time_point deadline, std::string& error) {
  const int n = round_.joined ? static_cast<int>(round_.members.size()) : opts_.nnodes_max;
  BarrierEnd end = BarrierEnd::failed;
  try {
    ensure_connected();
    PrefixStore s = store();
    arrive_at_barrier(s, name, n);
    std::optional<std::size_t> got;
    {
      // From here the wait holds the connection: an abort() of another thread goes around it.
      const BarrierGate::Wait waiting(gate_);
      // A node 0 the watch declared lost before this wait began would never answer it (the watch
      // closes the connection only under a waiting barrier).
      if (watch_.node0_lost())
        throw store::Error(store::Error::Kind::io, "the rendezvous store is lost", "barrier", endpoint());
      got = s.wait_any({keys::barrier_done(name), keys::kAbort}, left_until(deadline));
    }
    end = !got ? BarrierEnd::timed_out : *got == 0 ? BarrierEnd::passed : BarrierEnd::aborted;
    if (end == BarrierEnd::passed && !server_) {
      ack_barrier(s, name);
    } else if (end == BarrierEnd::passed) {
      watch_.stop_watching();  // the others leaving now is expected
      // Keep serving until every other node has seen the barrier pass (bounded). Every node arrived,
      // so the barrier has passed even when some acks do not come in time.
      std::vector<std::string> acks;
      for (const auto& p : round_.members) {
        if (p.orig_rank != opts_.node_rank) acks.push_back(keys::barrier_ack(name, p.orig_rank));
      }
      try {
        if (!acks.empty()) s.wait(acks, std::min(left_until(deadline) + Millis{1000}, Millis{10000}));
      } catch (const store::Error&) {
      }
    }
  } catch (const store::Error& e) {
    error = e.what();
    end = BarrierEnd::failed;
  }
  if (end == BarrierEnd::passed) {
    gate_.passed = true;
    stop_watch();
  }
  return end;
}

bool Rendezvous::Impl::barrier(const std::string& name, Millis timeout) {
  std::string error;
  return wait_barrier(name, Clock::now() + timeout, error) == BarrierEnd::passed;
}

ExitBarrierEnd Rendezvous::Impl::exit_barrier() {
  std::string error;
  const BarrierEnd end = wait_barrier("exit", Clock::now() + kMaxWait, error);
  if (end == BarrierEnd::passed) return {};
  if (end == BarrierEnd::aborted) {
    try {
      if (auto v = store().get(keys::kAbort, Millis{0})) return {core::decode_failure(*v), true};
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  // The watch's reason: no answer, or the connection gone.
  if (auto lost = watch_.lost_node0()) return {std::move(*lost), false};
  if (end == BarrierEnd::timed_out) error = "the exit barrier did not pass";
  if (server_) {
    core::Failure info;
    info.reason = fmt::format("the exit barrier failed on the rendezvous store {}: {}", endpoint(), error);
    info.host = opts_.host;
    info.node_rank = 0;
    info.exit_code = 1;
    info.time = core::failure_now();
    return {info, false};
  }
  return {watch_.lost_node0_failure(endpoint(), opts_.host, error), false};
}

// This node could not publish its root cause beside its waiting exit barrier: the other nodes cannot
// end that wait for it, so it ends here (its connection closed, the barrier returns node 0
// as lost), and the node goes on with its own failure.
void Rendezvous::Impl::end_barrier_wait() {
  const auto held = gate_.hold();
  if (gate_.waiting() && client_) client_->close();
}

// The root cause, published beside a waiting barrier's connection: in-process on node 0, on a short
// connection of its own elsewhere. The abort key wakes every node's barrier, this one's too.
core::Failure Rendezvous::Impl::abort_beside_barrier(const std::string& encoded) {
  std::shared_ptr<Store> target;
  if (server_) {
    target = std::make_shared<ServerStore>(*server_);
  } else {
    target = connect_client(labels::abort(opts_.node_rank), Millis{0}, kBesideTimeout, kBesideTimeout);
  }
  PrefixStore s(key_prefix(), target);
  const std::string winner = s.compare_set(keys::kAbort, "", encoded);
  return core::decode_failure(winner);
}

}  // namespace ddprun::rdzv
