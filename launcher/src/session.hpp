#pragma once
// How one node meets the others for each attempt (job.cpp's attempts loop). Private to the launcher.
#include <chrono>
#include <optional>
#include <vector>

#include "agent/coordinator.hpp"
#include "agent/events.hpp"
#include "core/config.hpp"
#include "core/failure.hpp"
#include "core/plan.hpp"
#include "core/plan_table.hpp"
#include "rendezvous/rendezvous.hpp"

namespace ddprun::launcher {

// One attempt's membership: the agreed plan (job constants and node table) and the workers this
// node runs, derived here from it.
struct Round {
  core::PlanTable table;
  std::vector<core::Worker> local;
  bool announce = false;  // this node prints the startup table
};

class Session {
 public:
  virtual ~Session() = default;
  virtual Round join(int attempt) = 0;
  virtual agent::Coordinator& coordinator() = 0;
  // The job's root cause as every node sees it (the first one published), if any.
  virtual std::optional<core::Failure> published_root() = 0;
  virtual void next_attempt() = 0;
};

inline std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<long>(seconds * 1000.0));
}

// The settings every rendezvous of this agent shares: run id, auth, timeouts, where its messages go.
rdzv::RendezvousOptions common_rdzv_options(const core::Options& o, const core::Resolved& r,
                                            rdzv::auth::Config auth, agent::Events& ev);

// The plan the master publishes, parsed; a malformed one is a protocol error naming the store.
core::PlanTable parse_published_plan(const std::string& text, const std::string& endpoint);

}  // namespace ddprun::launcher
