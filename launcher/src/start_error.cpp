// publish_start_error (start_error.hpp): a start-up error published at the rendezvous store, or, in
// per-task mode, a relay's failed health check through its session.
#include "launcher/start_error.hpp"

#include <exception>
#include <utility>

#include "agent/events.hpp"
#include "agent/signals.hpp"
#include "launcher/auth_setup.hpp"
#include "launcher/health_check.hpp"
#include "per_task_session.hpp"
#include "rendezvous/rendezvous.hpp"
#include "session.hpp"
#include "session_common.hpp"

namespace ddprun::launcher {

namespace {

// Whom a start-up error concerns besides this node: the other agents of a run (not a dry run) that
// meet at a store.
bool shares_start_errors(const core::Options& o, const core::Resolved& r) {
  return !o.dry_run && r.mode == core::Mode::agent && r.nagents > 1 && r.rdzv_port != 0;
}

}  // namespace

void publish_start_error(const core::Options& o, const core::Resolved& r, const std::string& what, int code) {
  const bool per_task_check = r.mode == core::Mode::per_task && !o.dry_run && code == kHealthCheckExitCode;
  if (!per_task_check && !shares_start_errors(o, r)) return;
  agent::Events ev(o.log_format == "json" ? agent::LogFormat::json : agent::LogFormat::text);
  ev.set_context(r.self.host.value_or("localhost"), r.job.node_rank);
  const core::Failure f = start_failure(r, what, code);
  // Per-task mode: only a relay's failed health check is published, by the session that relays.
  if (per_task_check) {
    try {
      make_per_task_session(o, r, resolve_auth(r, o.quiet, ev), ev)->fail_start(f);
    } catch (const std::exception&) {
      // Printed on this node already; the others end at their --rdzv-timeout.
    }
    return;
  }
  try {
    rdzv::RendezvousOptions ro = agent_rdzv_options(o, r, resolve_auth(r, o.quiet, ev), ev);
    ro.on_progress = nullptr;  // this agent waits for nobody's plan
    // This agent leaves with its own code, which srun's SIGTERM (sent once an agent exits) must not change.
    agent::hold_stop_signals();
    rdzv::Rendezvous rz(std::move(ro));
    rz.fail_start(f);
  } catch (const std::exception&) {
    // The error is this node's own and already printed; the others cannot be told (no store, no
    // credential), and end as before: at their --rdzv-timeout.
  }
}

}  // namespace ddprun::launcher
