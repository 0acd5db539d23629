#include "store_search.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <utility>

#include "probe.hpp"
#include "store/client.hpp"

namespace ddprun::launcher {

namespace {
// The connection's label in the store's reports (it never joins, so no liveness promise).
constexpr const char* kObserverLabel = "observe";
}  // namespace

std::shared_ptr<store::TcpStore> open_store(const JobTarget& t, const store::auth::Config& auth,
                                            std::chrono::milliseconds timeout) {
  store::ClientOptions co;
  co.host = t.connect_to();
  co.port = t.port;
  co.run_id = t.run_id;
  co.auth = auth;
  co.label = kObserverLabel;
  co.connect_timeout = timeout;
  co.op_timeout = timeout;
  co.one_round = true;           // a refused connection is the answer: no job there
  co.wait_for_handshake = true;  // a refusal (run id, credential) is thrown here
  return std::make_shared<store::TcpStore>(std::move(co));
}

void throw_observe_error(const JobTarget& t, const store::Error& e) {
  switch (e.kind()) {
    case store::Error::Kind::other_run: {
      const auto served = served_run_id(e.what(), t.run_id);
      throw core::Error(
          fmt::format("no job with --rdzv-id {} at {}: the store there serves another run{}; give the id the "
                      "job was started with",
                      t.run_id, t.endpoint(), served ? fmt::format(" ('{}')", *served) : std::string()),
          kObserveExit);
    }
    case store::Error::Kind::rejected:
      throw CredentialRefused(fmt::format("the job's store at {} refused this ddprun's credential ({}): use "
                                          "the job's DDPRUN_TOKEN or --rdzv-token-file, or run as the job's "
                                          "user where MUNGE serves it",
                                          t.describe(), e.what()),
                              kObserveExit);
    default:
      throw core::Error(fmt::format("no ddprun job is answering at {}: it has finished, or never started "
                                    "there ({})",
                                    t.describe(), e.what()),
                        kObserveExit);
  }
}

std::shared_ptr<store::TcpStore> first_store(const std::vector<JobTarget>& targets,
                                             const store::auth::Config& auth,
                                             std::chrono::milliseconds timeout, JobTarget& found,
                                             SearchLog& log) {
  // Probed grouped by host, so that the ports of one dead host share a batch and its one timeout.
  std::vector<std::size_t> order(targets.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return targets[a].connect_to() < targets[b].connect_to();
  });
  std::vector<ProbePlace> places;
  places.reserve(targets.size());
  for (const std::size_t i : order) places.push_back({targets[i].connect_to(), targets[i].port});
  const auto open_sorted = accepting(places, timeout);
  std::vector<bool> open(targets.size(), false);
  for (std::size_t k = 0; k < order.size(); ++k) open[order[k]] = open_sorted[k];
  for (std::size_t i = 0; i < targets.size(); ++i) {
    if (!open[i]) continue;
    JobTarget t = targets[i];
    for (int tries = 0; tries < 2; ++tries) {
      try {
        auto s = open_store(t, auth, timeout);
        found = t;
        return s;
      } catch (const store::Error& e) {
        if (e.kind() == store::Error::Kind::rejected) throw_observe_error(t, e);
        if (e.kind() != store::Error::Kind::other_run) break;  // gone meanwhile, or not a ddprun store
        const auto served = served_run_id(e.what(), t.run_id);
        // The step's store, started with --rdzv-id: the id it named is the job's.
        if (tries == 0 && served && serves_step(*served, t.step_run)) {
          t.run_id = *served;
          continue;
        }
        log.other_runs.push_back(fmt::format("{} ('{}')", t.endpoint(), served.value_or("?")));
        break;
      }
    }
  }
  return nullptr;
}

std::shared_ptr<store::TcpStore> connect_named_job(JobTarget& t, const store::auth::Config& auth,
                                                   std::chrono::milliseconds timeout) {
  std::string why;
  try {
    return open_store(t, auth, timeout);
  } catch (const store::Error& e) {
    // A store that answered (another run, a refused credential) is where the user pointed: no search.
    if (e.kind() == store::Error::Kind::other_run || e.kind() == store::Error::Kind::rejected) {
      throw_observe_error(t, e);
    }
    why = e.what();
  }
  SearchLog log;
  JobTarget found;
  if (auto s = first_store(failover_targets({t.host}, {t}), auth, timeout, found, log)) {
    t = found;
    return s;
  }
  throw core::Error(
      fmt::format("no ddprun job is answering at {}: it has finished, or never started there "
                  "({}); nor on ports {}-{} of {}, where a node-0 failover moves the store when "
                  "the new node 0 runs there (the survivors print where: 'the rendezvous "
                  "store moved to HOST:PORT')",
                  t.describe(), why, t.port + 1, t.port + kMaxFailovers + 1, t.host),
      kObserveExit);
}

}  // namespace ddprun::launcher
