// The end of an attempt: every agent's compact record, gathered by node 0 for the job-wide
// summary (docs/agent.md). Bounded everywhere: a lost or hung agent costs node 0 at most the
// gather's timeout, a lost node 0 costs an agent about kPublishTimeout.
#include <algorithm>

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
constexpr Millis kPublishTimeout{2000};  // connect and answer, each
constexpr Millis kGatherPoll{100};       // how often node 0 looks whether anyone is left
}  // namespace

bool Rendezvous::Impl::publish_result(const std::string& record) {
  // A node 0 this agent already declared lost takes no record: report here, without trying (an
  // elastic job's survivors then restart without that wait).
  if (!round_.joined || watch_.node0_lost()) return false;
  if (server_) {
    // Node 0's own record goes straight into its store: its connection may wait behind
    // thousands of others at the end of a large job.
    try {
      PrefixStore s(key_prefix(), std::make_shared<ServerStore>(*server_));
      s.set(keys::result(opts_.node_rank), record);
      return true;
    } catch (const store::Error&) {
      return false;
    }
  }
  // On the agent's one connection, its answer awaited at most kPublishTimeout.
  if (client_ && client_->connected()) {
    try {
      PrefixStore s(key_prefix(), client_);
      s.set(keys::result(opts_.node_rank), record);
      client_->flush(kPublishTimeout);
      return true;
    } catch (const store::Error&) {
      if (client_->connected()) return false;  // node 0 did not answer in time
    }
  }
  try {
    // That connection is gone (the store dropped it): a short one of its own.
    auto conn = connect_client(labels::result(opts_.node_rank), Millis{0}, kPublishTimeout, kPublishTimeout);
    PrefixStore s(key_prefix(), conn);
    s.set(keys::result(opts_.node_rank), record);
    conn->flush();  // node 0 has it
    return true;
  } catch (const store::Error&) {
    return false;
  }
}

bool Rendezvous::Impl::try_write(const std::string& key, const std::string& value,
                                 Rendezvous::WriteOptions how) {
  if (how.keep) status_.keep(key, value);
  const std::shared_ptr<StoreServer> server = status_.server();  // kept while in use (follow may stop it)
  try {
    if (server) {
      ServerStore(*server).set(key, value);
      return true;
    }
    std::shared_ptr<TcpStore> conn;
    bool beside = false;
    {
      // abort() may replace the connection under this lock: take it only when free.
      const auto held = gate_.try_hold();
      if (!held.owns_lock() || watch_.node0_lost()) return false;
      beside = gate_.waiting();
      conn = client_;
    }
    if (beside) {
      // The exit barrier holds the connection for as long as the job runs elsewhere: a short one of its
      // own when asked (a `ddprun stacks` reply, rare), so that a node done with its work still answers.
      if (!how.beside_barrier) return false;
      auto side = connect_client(labels::reply(opts_.node_rank), Millis{0}, kPublishTimeout, kPublishTimeout);
      side->set(key, value);
      return true;
    }
    if (!conn || !conn->connected()) return false;
    return conn->try_set(key, value);
  } catch (const store::Error&) {
    return false;  // the connection is gone: the watch reports node 0 lost
  }
}

std::optional<std::string> Rendezvous::Impl::local_status(const std::string& key) {
  if (const std::shared_ptr<StoreServer> server = status_.server()) {
    try {
      ServerStore s(*server);
      if (!s.check({key})) return std::nullopt;
      return s.get(key, Millis{0});
    } catch (const store::Error&) {
      return std::nullopt;
    }
  }
  return status_.kept(key);
}

std::vector<ResultRecord> Rendezvous::Impl::gather_results(Millis timeout, std::optional<int> lost) {
  std::vector<ResultRecord> out;
  if (!server_ || !round_.joined) return out;
  std::vector<std::string> all, awaited;
  for (const auto& p : round_.members) {
    if (p.standby) continue;  // a standby has no run to report (standbys follow the active nodes)
    const int rank = static_cast<int>(out.size());
    out.push_back({rank, p.host, std::nullopt});
    all.push_back(keys::result(p.orig_rank));
    if (rank != lost) awaited.push_back(all.back());
  }
  const auto deadline = Clock::now() + timeout;
  try {
    PrefixStore s = store();
    while (!s.wait(awaited, std::min(left_until(deadline), kGatherPoll))) {
      if (left_until(deadline) == Millis{0} || !others_connected()) break;
    }
  } catch (const store::Error&) {
    // The wait failed (our connection, at the end of a large job): read what has come.
  }
  // Read in-process, each record on its own: one that never came is no report, not the end of all.
  PrefixStore local(key_prefix(), std::make_shared<ServerStore>(*server_));
  for (std::size_t i = 0; i < all.size(); ++i) {
    try {
      out[i].record = local.get(all[i], Millis{0});
    } catch (const store::Error&) {
    }
  }
  return out;
}

}  // namespace ddprun::rdzv
