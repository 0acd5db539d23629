#include "launcher/observe/job_locator.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <utility>

#include "core/config.hpp"
#include "core/error.hpp"
#include "launcher/auth_setup.hpp"
#include "store/client.hpp"
#include "store/error.hpp"

namespace ddprun::launcher {

namespace {
// The connection's label in the store's reports (it never joins, so no liveness promise).
constexpr const char* kObserverLabel = "observe";
}  // namespace

std::string JobTarget::describe() const {
  return fmt::format("{}:{} (--rdzv-id {})", host, port, run_id);
}

JobTarget locate_job(const JobQuery& q) {
  if (!q.rdzv_endpoint || !q.rdzv_id) {
    throw core::Error(
        "name the job: --rdzv-endpoint HOST:PORT and --rdzv-id ID, as the job was started with (its "
        "store's endpoint is printed by node rank 0: 'rendezvous store listening on HOST:PORT')");
  }
  const auto [host, port] = core::parse_endpoint("--rdzv-endpoint", *q.rdzv_endpoint);
  JobTarget t;
  t.host = host;
  t.port = port.value_or(core::kDefaultStorePort);
  t.run_id = *q.rdzv_id;
  return t;
}

rdzv::auth::Config observer_auth(const JobQuery& q, const core::EnvSnapshot& env) {
  std::optional<std::string> token;
  if (const auto it = env.find("DDPRUN_TOKEN"); it != env.end() && !it->second.empty()) token = it->second;
  try {
    return rdzv::auth::resolve(rdzv::auth::parse_policy(q.rdzv_auth), token, q.rdzv_token_file,
                               munge_socket(env));
  } catch (const rdzv::Error& e) {
    throw core::Error(e.what());
  }
}

std::shared_ptr<rdzv::TcpStore> connect_job(const JobTarget& t, const rdzv::auth::Config& auth,
                                            std::chrono::milliseconds timeout) {
  rdzv::ClientOptions co;
  co.host = t.host;
  co.port = t.port;
  co.run_id = t.run_id;
  co.auth = auth;
  co.label = kObserverLabel;
  co.connect_timeout = timeout;
  co.op_timeout = timeout;
  co.one_round = true;           // a refused connection is the answer: no job there
  co.wait_for_handshake = true;  // a refusal (run id, credential) is thrown here
  try {
    return std::make_shared<rdzv::TcpStore>(std::move(co));
  } catch (const rdzv::Error& e) {
    switch (e.kind()) {
      case rdzv::Error::Kind::other_run:
        throw core::Error(
            fmt::format("no job with --rdzv-id {} at {}:{}: the store there serves another run; "
                        "give the id the job was started with",
                        t.run_id, t.host, t.port),
            kObserveExit);
      case rdzv::Error::Kind::rejected:
        throw core::Error(fmt::format("the job's store at {} refused this ddprun's credential ({}): use the "
                                      "job's DDPRUN_TOKEN or --rdzv-token-file, or run as the job's user "
                                      "where MUNGE serves it",
                                      t.describe(), e.what()),
                          kObserveExit);
      default:
        throw core::Error(fmt::format("no ddprun job is answering at {}: it has finished, or never started "
                                      "there ({})",
                                      t.describe(), e.what()),
                          kObserveExit);
    }
  }
}

std::vector<core::NodeStatus> read_job_status(rdzv::TcpStore& store, const JobTarget& t) {
  const auto lost = [&t](const rdzv::Error& e) {
    return core::Error(fmt::format("the job's store at {} stopped answering: {}", t.describe(), e.what()),
                       kObserveExit);
  };
  std::optional<std::string> first;
  try {
    first = store.get(core::status_key(0), std::chrono::milliseconds{0});
  } catch (const rdzv::Error& e) {
    if (e.kind() == rdzv::Error::Kind::rejected || e.kind() == rdzv::Error::Kind::other_run) {
      throw core::Error(fmt::format("the job's store at {} refused this ddprun: {}", t.describe(), e.what()),
                        kObserveExit);
    }
    throw lost(e);
  }
  if (!first) {
    throw core::Error(fmt::format("the job at {} has published no status yet: its workers have not started "
                                  "(still joining), or its ddprun predates `ddprun top`",
                                  t.describe()),
                      kObserveExit);
  }
  std::vector<core::NodeStatus> out;
  out.push_back(core::decode_node_status(*first));
  const int nnodes = out.front().nnodes;
  for (int n = 1; n < nnodes; ++n) {
    try {
      if (const auto rec = store.get(core::status_key(n), std::chrono::milliseconds{0})) {
        out.push_back(core::decode_node_status(*rec));
      }
    } catch (const core::Error&) {
      // A malformed record: that node is shown as silent.
    } catch (const rdzv::Error& e) {
      throw lost(e);
    }
  }
  return out;
}

}  // namespace ddprun::launcher
