// What the sessions share (rendezvous_session.cpp, per_task_session.cpp, job.cpp's LocalSession): the
// settings of every rendezvous, where the workers' store's lines go, the published plan read back, a
// start failure as published. Private to the launcher; the attempts loop (job.cpp) is not called from here.
#include "session_common.hpp"

#include <cstdio>
#include <utility>

#include <fmt/format.h>

#include "agent/signals.hpp"
#include "core/error.hpp"
#include "launcher/self_launch.hpp"
#include "launcher/system.hpp"
#include "store/error.hpp"

namespace ddprun::launcher {

core::Failure start_failure(const core::Resolved& r, const std::string& what, int code) {
  core::Failure f;
  f.host = r.self.host.value_or("");
  f.node_rank = r.job.node_rank;
  f.exit_code = code;
  f.reason = what;
  f.fatal = true;  // input that cannot start, a node that failed its check: no restart helps
  return f;
}

rdzv::RendezvousOptions common_rdzv_options(const core::Options& o, const core::Resolved& r,
                                            store::auth::Config auth, agent::Events& ev) {
  rdzv::RendezvousOptions ro;
  ro.run_id = r.rdzv_run_id.empty() ? r.job.run_id : r.rdzv_run_id;
  ro.auth = std::move(auth);
  ro.log = [&ev](const std::string& line) {
    if (ev.json()) {
      ev.emit("rejected_peer", {{"message", line}});
    } else {
      fmt::print(stderr, "{}\n", line);
    }
  };
  ro.join_timeout = to_ms(r.rdzv_timeout);
  ro.last_call = to_ms(r.last_call);
  // Another agent could not start: this one leaves with its exit code, which srun --kill-on-bad-exit's
  // SIGTERM (sent once the first agent exits) must not turn into 143.
  ro.on_start_failure = [] { agent::hold_stop_signals(); };
  // Every 10 s of waiting, say who is still missing; in an interactive srun --pty step, once, why.
  ro.on_progress = [&ev, quiet = o.quiet,
                    hint = pty_step_hint(snapshot_environ(), r)](const std::string& m) mutable {
    if (ev.json()) {
      ev.emit("rendezvous_waiting", {{"message", m}});
    } else if (!quiet) {
      fmt::print(stderr, "ddprun: {}\n", m);
    }
    if (hint) ev.warn(*std::exchange(hint, std::nullopt));
  };
  return ro;
}

std::function<void(const std::string&)> worker_store_log(agent::Events& ev) {
  return [&ev](const std::string& line) {
    if (ev.json()) {
      ev.emit("worker_store", {{"message", line}});
    } else {
      fmt::print(stderr, "ddprun: {}\n", line);
    }
  };
}

core::PlanTable parse_published_plan(const std::string& text, const std::string& endpoint) {
  try {
    return core::decode_plan_table(text);
  } catch (const core::Error& e) {
    throw store::Error(store::Error::Kind::protocol,
                       fmt::format("rendezvous {}: the published plan is malformed: {}", endpoint, e.what()),
                       "join", endpoint);
  }
}

}  // namespace ddprun::launcher
