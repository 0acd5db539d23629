// Liveness, as the Rendezvous runs it: every agent's watch (watch.cpp) on its one connection from its
// arrival on, and on node 0, once the round is joined, the lost-agent monitor (lost_monitor.cpp).
#include <algorithm>

#include "core/stack_groups.hpp"
#include "keys.hpp"
#include "rendezvous_impl.hpp"
#include "store/client.hpp"

namespace ddprun::rdzv {

LivenessTiming liveness_timing(Millis heartbeat_interval, Millis heartbeat_timeout, int nnodes) {
  // Node 0 gets at most kMaxHeartbeatRate heartbeats a second, whatever the job's size.
  const Millis by_rate{(static_cast<std::int64_t>(std::max(nnodes, 1)) * 1000 + kMaxHeartbeatRate - 1) /
                       kMaxHeartbeatRate};
  const Millis interval = std::max({heartbeat_interval, by_rate, Millis{1}});
  // Three missed heartbeats before an agent is lost; the agent waits twice that before it calls a
  // busy node 0 lost.
  const Millis agent_timeout = std::max(heartbeat_timeout, 3 * interval);
  return {interval, agent_timeout, 2 * agent_timeout};
}

LivenessTiming Rendezvous::Impl::timing() const {
  return liveness_timing(opts_.heartbeat_interval, opts_.heartbeat_timeout, round_.nnodes(opts_.nnodes_max));
}

void Rendezvous::Impl::watch(std::function<void(const core::Failure&)> on_abort) {
  if (!watch_.watching() && !watch_.fired()) start_liveness();  // e.g. after a barrier stopped it
  watch_.install(std::move(on_abort));
}

void Rendezvous::Impl::start_liveness() {
  stop_watch();
  watch_.rearm(round_.host_of(0, opts_.expected_hosts));
  check_watch_ = false;  // the watch below replaces wait_beside_check's subscription
  // A request of an earlier attempt was answered then; one still waiting is pushed again below.
  status_.forget_stacks_request();
  const LivenessTiming t = timing();
  // One connection per agent: the main one now carries the heartbeat and the abort push too.
  ensure_connected();
  // Index 0 the abort; index 1 `ddprun stacks`' request (docs/observe.md), pushed on each write, so
  // that no agent reads the store for it.
  client_->watch(labels::agent(opts_.attempt, opts_.node_rank), t.agent_timeout,
                 {key_prefix() + keys::kAbort, core::kStacksRequestKey});
  watch_.start({client_, t, server_ != nullptr, opts_.node_rank, endpoint(), opts_.host});
  if (server_ && round_.joined) start_monitor();
}

// Node 0, once the participants are known: the monitor gets a copy of them.
void Rendezvous::Impl::start_monitor() {
  monitor_.start(*server_, {opts_.attempt, opts_.node_rank, round_.members,
                            round_.plan_published + opts_.heartbeat_timeout, opts_.heartbeat_timeout});
}

void Rendezvous::Impl::stop_watch() {
  watch_.stop();
  monitor_.stop();
}

std::optional<Millis> Rendezvous::Impl::cut_off() const {
  const std::int64_t gap = watch_.longest_gap_ms();
  const LivenessTiming t = timing();
  const Millis others_wait = server_ ? t.node0_timeout : t.agent_timeout;
  if (gap <= others_wait.count()) return std::nullopt;
  return Millis{gap};
}

}  // namespace ddprun::rdzv
