#pragma once
// What the sessions share (session.hpp's Session and its kinds): private to the launcher. Nothing here
// calls the attempts loop (job.cpp), which only uses it.
#include <chrono>
#include <functional>
#include <string>

#include "agent/events.hpp"
#include "core/config.hpp"
#include "core/failure.hpp"
#include "core/plan_table.hpp"
#include "rendezvous/rendezvous.hpp"
#include "store/auth.hpp"

namespace ddprun::launcher {

// What a node that cannot start (or cannot join a restart's round) publishes as the root cause: its
// host and node rank, `what` and exit code `code`.
core::Failure start_failure(const core::Resolved& r, const std::string& what, int code);

inline std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<long>(seconds * 1000.0));
}

// The settings every rendezvous of this agent shares: run id, auth, timeouts, where its messages go.
rdzv::RendezvousOptions common_rdzv_options(const core::Options& o, const core::Resolved& r,
                                            store::auth::Config auth, agent::Events& ev);

// Where the workers' store's lines go: a worker_store event, or a "ddprun: ..." line on stderr.
std::function<void(const std::string&)> worker_store_log(agent::Events& ev);

// The plan node 0 publishes, parsed; a malformed one is a protocol error naming the store.
core::PlanTable parse_published_plan(const std::string& text, const std::string& endpoint);

}  // namespace ddprun::launcher
