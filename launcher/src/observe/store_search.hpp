#pragma once
// Looking for a job's store among many places (job_locator.cpp): all probed at once, then a handshake
// with each place that accepted, in order, until one serves the job. Bounded by a few timeouts however
// many places there are, so that a dead node 0 (its SYNs unanswered) costs one timeout, not one per port.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "launcher/observe/job_locator.hpp"
#include "store/auth.hpp"
#include "store/error.hpp"

namespace ddprun::store {
class TcpStore;
}

namespace ddprun::launcher {

// A connection to `t`, the hello answered; the store's own error (store::Error) when it cannot be made.
std::shared_ptr<store::TcpStore> open_store(const JobTarget& t, const store::auth::Config& auth,
                                            std::chrono::milliseconds timeout);

// Throws the one line for a place that refused or did not answer (connect_job's errors): CredentialRefused
// for a refused credential, else core::Error (kObserveExit).
[[noreturn]] void throw_observe_error(const JobTarget& t, const store::Error& e);

// What a search saw besides the store, for its error line.
struct SearchLog {
  std::vector<std::string> other_runs;  // "HOST:PORT ('ID')": another run's store answered there
};

// The first of `targets`, in order, whose store serves its run id, or the target's step_run under
// another id (a job started with --rdzv-id); `found` is then that place and run. nullptr when none
// does. Throws CredentialRefused: the job is there and will not have us.
std::shared_ptr<store::TcpStore> first_store(const std::vector<JobTarget>& targets,
                                             const store::auth::Config& auth,
                                             std::chrono::milliseconds timeout, JobTarget& found,
                                             SearchLog& log);

// --rdzv-endpoint and --rdzv-id: that place, else (nothing listens there) where a node-0 failover moved
// the store when the new node 0 runs on the same host (the ports above). `t` becomes where it was found.
std::shared_ptr<store::TcpStore> connect_named_job(JobTarget& t, const store::auth::Config& auth,
                                                   std::chrono::milliseconds timeout);

}  // namespace ddprun::launcher
