// Agents outside a round (docs/rendezvous.md, "Standbys that come late"): one that arrives after a round
// closed waits for the next one, one whose --health-check runs hears of the job's end, one whose check
// failed declines; node 0 tells them all when the job ends.
#include <algorithm>
#include <thread>

#include <fmt/core.h>

#include "core/error.hpp"
#include "core/failure.hpp"
#include "deadline.hpp"
#include "keys.hpp"
#include "rendezvous_impl.hpp"
#include "store/client.hpp"
#include "store/server.hpp"
#include "store/store.hpp"

namespace ddprun::rdzv {

using detail::Clock;

namespace {

std::string plural(int n, const char* word) {
  return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s");
}

}  // namespace

// The job-wide keys (keys::kCurrentAttempt, keys::kOver), outside every attempt's namespace.
PrefixStore Rendezvous::Impl::job_store() const {
  return PrefixStore("", client_);
}

// An agent that comes while the job runs (it came late, or it was cut off and follows the job) joins
// the attempt of the last published plan; one that comes first finds none and joins attempt 0.
void Rendezvous::Impl::adopt_current_attempt() {
  const auto v = job_store().get(keys::kCurrentAttempt, Millis{0});
  if (!v) return;
  const int current = std::atoi(v->c_str());
  if (current > opts_.attempt) opts_.attempt = current;
}

// The round closed without this agent: it waits for the next one, in that attempt's namespace, where
// node 0 finds its arrival (wait_for_survivors) as long as its heartbeats run.
void Rendezvous::Impl::wait_for_next_round() {
  stop_watch();
  ++opts_.attempt;
}

std::optional<int> Rendezvous::Impl::job_over() {
  try {
    if (const auto v = job_store().get(keys::kOver, Millis{0})) return std::atoi(v->c_str());
  } catch (const store::Error&) {
  }
  return std::nullopt;
}

// The node ranks that declined this attempt's round.
std::set<int> Rendezvous::Impl::declined_ranks(PrefixStore& s) const {
  std::set<int> out;
  const std::int64_t n = s.add(keys::kDeclined, 0);
  for (std::int64_t i = 1; i <= n; ++i) {
    if (const auto v = s.get(keys::declined(i), Millis{2000})) out.insert(std::atoi(v->c_str()));
  }
  return out;
}

// The cause the first of `ranks` (node ranks) that declined published; nullopt when none did.
std::optional<core::Failure> Rendezvous::Impl::declined_cause(PrefixStore& s,
                                                              const std::vector<int>& ranks) const {
  for (const int r : ranks) {
    const auto v = s.get(keys::decline(r), Millis{0});
    if (!v) continue;
    try {
      return core::decode_failure(*v);
    } catch (const core::Error&) {
    }
  }
  return std::nullopt;
}

// The first round cannot reach MIN: every node that can come is in or declined. The first decline's
// cause, with the count, becomes the round's start-up error: every agent leaves with its line and code.
void Rendezvous::Impl::fail_short(PrefixStore& s, int in) {
  const std::set<int> declined = declined_ranks(s);
  core::Failure f = declined_cause(s, {declined.begin(), declined.end()}).value_or(core::Failure{});
  if (f.exit_code == 0) f.exit_code = 1;
  f.reason =
      fmt::format("{}; {} left, fewer than the minimum of {} (--nnodes {}:MAX), and no standby was waiting",
                  f.reason, plural(in, "node"), opts_.nnodes_min, opts_.nnodes_min);
  if (f.time == core::FailureTime{}) f.time = core::failure_now();
  s.compare_set(keys::kAbort, "", core::encode_failure(f));
  leave_after_start_failure(s);
}

void Rendezvous::Impl::decline(const core::Failure& cause_in) {
  core::Failure cause = cause_in;
  if (cause.time == core::FailureTime{}) cause.time = core::failure_now();
  try {
    ensure_connected();
    if (!server_) adopt_current_attempt();
    PrefixStore s = store();
    s.set(keys::decline(opts_.node_rank), core::encode_failure(cause));
    s.set(keys::declined(s.add(keys::kDeclined, 1)), std::to_string(opts_.node_rank));
    // A restart's round waits for every survivor's present key: this one is not coming.
    s.set(keys::present(opts_.node_rank), "1");
    // It has read whatever the round ends with: node 0 and the others wait for everyone's read.
    s.set(keys::start_read(s.add(keys::kStartRead, 1)), std::to_string(opts_.node_rank));
    // It stays until the round is decided: when the round fails for it, until every agent has read why,
    // since its exit may end theirs (srun --kill-on-bad-exit) before they could leave with its code.
    const auto got = client_->wait_any(
        {s.prefix() + keys::kPlan, s.prefix() + keys::kAbort, s.prefix() + keys::kJoinError},
        opts_.join_timeout);
    if (got && *got != 0) {
      const int agents = opts_.attempt > 0 ? static_cast<int>(round_.previous.size())
                                           : (opts_.nagents > 0 ? opts_.nagents : opts_.nnodes_max);
      await_reads(s, agents, false);
    }
  } catch (const std::exception&) {
    // Node 0 cannot be told: the round waits for this node as for one that never came.
  }
}

void Rendezvous::Impl::wait_beside_check() {
  if (server_) return;
  ensure_connected();
  if (opts_.elastic) adopt_current_attempt();
  // Heartbeats are no promise here: the check may take minutes and nobody waits for this agent yet. Only
  // the job's end stops the check: a failed round or attempt meanwhile is for the join to read.
  client_->watch(labels::waiting(opts_.node_rank), Millis{0}, {keys::kOver});
  check_watch_ = true;
}

bool Rendezvous::Impl::interrupted() {
  if (!check_watch_) return false;
  try {
    return !client_->poll_events(Millis{0}).empty();
  } catch (const store::Error&) {
    return true;  // node 0 is gone: the join says so
  }
}

// Whether an agent outside the round is still connected (one in its health check, a late standby counted
// in the next attempt), not one declared lost.
bool Rendezvous::Impl::waiting_connected() {
  const std::set<std::string> lost = monitor_.lost_labels();
  std::set<int> members;
  for (const auto& m : round_.members) members.insert(m.orig_rank);
  for (const auto& label : server_->labels("")) {
    const bool agent = label.starts_with(labels::kMainPrefix) || label.starts_with(labels::kWaitingPrefix) ||
                       label.starts_with("agent/");
    if (!agent || lost.contains(label)) continue;
    const int rank = std::atoi(label.substr(label.rfind('/') + 1).c_str());
    if (rank != opts_.node_rank && !members.contains(rank)) return true;
  }
  return false;
}

void Rendezvous::Impl::finish(int exit_code) {
  if (!server_) return;
  try {
    ServerStore(*server_).set(keys::kOver, std::to_string(exit_code));
    const auto deadline = Clock::now() + opts_.heartbeat_timeout;
    while (Clock::now() < deadline && waiting_connected()) {
      std::this_thread::sleep_for(Millis{10});  // shutdown path only
    }
  } catch (const std::exception&) {
  }
  // A lost store host that was only stopped reads the code when it resumes: the set waits in its socket.
  for (const auto& [host, port] : round_.past_stores) {
    try {
      ClientOptions co;
      co.host = host;
      co.port = port;
      co.run_id = opts_.run_id;
      co.auth = opts_.auth;
      co.label = "outcome";
      co.one_round = true;
      co.connect_timeout = Millis{1000};
      co.op_timeout = Millis{500};  // no answer comes from a stopped process: the destructor waits this long
      TcpStore(std::move(co)).set(keys::kOver, std::to_string(exit_code));
    } catch (const store::Error&) {
      // Dead for good, or out of reach: nobody there to tell.
    }
  }
}

std::optional<int> Rendezvous::Impl::outcome_left_here() {
  if (!server_) return std::nullopt;
  try {
    if (const auto v = ServerStore(*server_).get(keys::kOver, Millis{0})) return std::atoi(v->c_str());
  } catch (const store::Error&) {
  }
  return std::nullopt;
}

bool Rendezvous::Impl::follow(const std::string& addr_in, std::uint16_t port_in) {
  // Empty: the store it was cut off from (an agent that node 0 declared lost).
  const std::string addr = addr_in.empty() ? opts_.host : addr_in;
  const std::uint16_t port = addr_in.empty() ? port_ : port_in;
  std::shared_ptr<TcpStore> conn;
  try {
    ClientOptions co;
    co.host = addr;
    co.port = port;
    co.run_id = opts_.run_id;
    co.auth = opts_.auth;
    co.label = labels::main_conn(opts_.node_rank);
    co.wait_for_handshake = true;  // a store of this run, not whatever took the port
    co.connect_timeout = opts_.heartbeat_timeout;
    co.op_timeout = std::max(opts_.heartbeat_timeout, Millis{30000});
    conn = std::make_shared<TcpStore>(std::move(co));
  } catch (const store::Error&) {
    return false;
  }
  stop_watch();
  if (server_) {
    ++round_.failovers;  // it follows the store its successor serves on the next port
    round_.past_stores.emplace_back(opts_.host, port_);
    status_.serve(nullptr);  // a status call in flight keeps it until it returns, with an error
    server_->stop();
    server_.reset();
  }
  client_ = std::move(conn);
  opts_.host = addr;
  opts_.port = port;
  port_ = port;
  // Like next_attempt: the round it was cut off from is over for it (its node rank stays claimed there);
  // the next join comes late, to a later one.
  ++opts_.attempt;
  round_.end_round({});
  clear_round();
  return true;
}

void Rendezvous::Impl::clear_round() {
  round_.clear_round();
  gate_.passed = false;
  watch_.clear_round();
  monitor_.forget_lost_labels();
}

// ---- Rendezvous: this file's calls, forwarded to its state (rendezvous.cpp forwards the others)

void Rendezvous::decline(const core::Failure& cause) {
  impl_->decline(cause);
}
void Rendezvous::wait_beside_check() {
  impl_->wait_beside_check();
}
bool Rendezvous::interrupted() {
  return impl_->interrupted();
}
void Rendezvous::finish(int exit_code) {
  impl_->finish(exit_code);
}
std::optional<Millis> Rendezvous::cut_off() const {
  return impl_->cut_off();
}
bool Rendezvous::follow(const std::string& addr, std::uint16_t port) {
  return impl_->follow(addr, port);
}
std::optional<int> Rendezvous::outcome_left_here() {
  return impl_->outcome_left_here();
}

}  // namespace ddprun::rdzv
