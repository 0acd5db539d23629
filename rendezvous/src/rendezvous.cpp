// The Rendezvous object: its connections, node 0's store, abort, restarts. The join round
// is in join.cpp, the watch in watch.cpp and the lost-agent monitor in lost_monitor.cpp (liveness.cpp starts
// them), the barrier in barrier.cpp.
#include "rendezvous_impl.hpp"

#include <unistd.h>

#include <algorithm>
#include <future>
#include <set>
#include <thread>

#include <fmt/core.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "deadline.hpp"
#include "keys.hpp"
#include "store/backoff.hpp"
#include "store/client.hpp"
#include "store/server.hpp"
#include "store/store.hpp"

namespace ddprun::rdzv {

using detail::Clock;
using nlohmann::json;

Rendezvous::Impl::Impl(RendezvousOptions o) : opts_(std::move(o)) {
  if (opts_.nnodes_min < 1 || opts_.nnodes_max < opts_.nnodes_min) {
    throw store::Error(store::Error::Kind::usage,
                       fmt::format("invalid node count {}:{}; use --nnodes N or MIN:MAX with 1 <= MIN "
                                   "<= MAX",
                                   opts_.nnodes_min, opts_.nnodes_max),
                       "rendezvous");
  }
  // Standbys (elastic) have node ranks beyond MAX.
  const int agents = opts_.elastic ? std::max(opts_.nnodes_max, opts_.nagents) : opts_.nnodes_max;
  if (opts_.node_rank < 0 || opts_.node_rank >= agents) {
    throw store::Error(store::Error::Kind::usage,
                       fmt::format("node rank {} is outside 0..{}; check --node-rank / SLURM_NODEID",
                                   opts_.node_rank, agents - 1),
                       "rendezvous");
  }
  port_ = opts_.port;
  if (opts_.node_rank == 0) serve_first_free();
}

// The store's port, else its first fallback that this node can bind (docs/rendezvous.md, "Ports").
void Rendezvous::Impl::serve_first_free() {
  std::vector<std::string> busy;
  for (std::size_t i = 0; i <= opts_.fallback_ports.size(); ++i) {
    const std::uint16_t port = i == 0 ? opts_.port : opts_.fallback_ports[i - 1];
    try {
      start_server(port);
      return;
    } catch (const store::Error& e) {
      if (opts_.fallback_ports.empty()) throw;
      if (e.op() != "listen") throw;
      busy.push_back(e.what());
    }
  }
  throw store::Error(
      store::Error::Kind::io,
      fmt::format("cannot serve the rendezvous store on port {} nor on its {} fallback ports ({}): {}; "
                  "free one of them or choose a port (--rdzv-endpoint HOST:PORT)",
                  opts_.port, opts_.fallback_ports.size(), fmt::join(opts_.fallback_ports, ", "),
                  busy.back()),
      "listen", endpoint());
}

void Rendezvous::Impl::start_server(std::uint16_t port) {
  {
    ServerOptions so;
    so.host = opts_.listen_host;
    so.port = port;
    so.run_id = opts_.run_id;
    so.auth = opts_.auth;
    so.log = opts_.log;
    // The store's thread: queued for the monitor's.
    so.on_lost = [this](const std::string& label, const std::string& reason) {
      monitor_.on_lost(label, reason);
    };
    server_ = std::make_shared<StoreServer>(std::move(so));
    // The status and metrics threads look at it there (try_write, local_status): a node 0's failover
    // starts it while they run.
    status_.serve(server_);
    port_ = server_->port();
  }
}

void Rendezvous::Impl::fail_over(int host_rank, const std::string& addr, std::uint16_t port) {
  ++round_.failovers;
  round_.past_stores.emplace_back(opts_.host, port_);
  client_.reset();  // the connection to the lost node 0
  opts_.host = addr;
  opts_.port = port;
  port_ = port;
  const auto i = static_cast<std::size_t>(host_rank);
  if (i >= round_.previous.size() || round_.previous[i].orig_rank != opts_.node_rank) return;
  // A process of the lost node 0's job that still dies on this host may hold the port a moment.
  const auto deadline = Clock::now() + Millis{3000};
  for (;;) {
    try {
      start_server(port);
      return;
    } catch (const store::Error&) {
      if (Clock::now() >= deadline) throw;
    }
    std::this_thread::sleep_for(Millis{100});
  }
}

Rendezvous::Impl::~Impl() {
  stop_watch();
  if (server_) {
    if (round_.joined && !gate_.passed) drain(opts_.heartbeat_timeout);
    server_->stop();
    status_.serve(nullptr);  // gone with server_, before the monitor it reports to
  }
}

void Rendezvous::Impl::drain(Millis limit) {
  if (!server_ || !round_.joined) return;
  // Only worth waiting for when the job is going down: on success the barrier already waited.
  if (!aborted()) return;
  linger(limit);
}

void Rendezvous::Impl::linger(Millis limit) {
  if (!server_) return;
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline && others_connected()) {
    std::this_thread::sleep_for(Millis{10});  // shutdown path only
  }
}

// Whether another agent still has a connection open: a main one (it may still be joining, or
// about to read the root cause) or a watch. An agent whose watch was lost or never came is not
// waited for: a stopped one keeps its main connection open until it resumes, maybe never.
bool Rendezvous::Impl::others_connected() {
  const std::set<std::string> lost = monitor_.lost_labels();
  const int attempt = opts_.attempt;
  const auto waits_for = [&](std::optional<int> r) {
    return r && *r != opts_.node_rank && !lost.contains(labels::agent(attempt, *r));
  };
  for (const auto& label : server_->labels(labels::kMainPrefix)) {
    if (waits_for(labels::main_node_rank(label))) return true;
  }
  for (const auto& label : server_->labels(labels::agent_prefix(attempt))) {
    if (waits_for(labels::agent_node_rank(label, attempt))) return true;
  }
  return false;
}

std::uint64_t Rendezvous::Impl::bytes_received() const {
  const auto c = client_;
  return c ? c->bytes_received() : 0;
}

std::string Rendezvous::Impl::endpoint() const {
  return fmt::format("{}:{}", opts_.host, port_);
}

std::vector<std::string> Rendezvous::Impl::peer_hosts() const {
  return server_ ? server_->peer_hosts() : std::vector<std::string>{};
}

std::string Rendezvous::Impl::key_prefix() const {
  return keys::attempt_prefix(opts_.attempt);
}

PrefixStore Rendezvous::Impl::store() const {
  return PrefixStore(key_prefix(), client_);
}

std::shared_ptr<TcpStore> Rendezvous::Impl::connect_client(const std::string& label, Millis liveness,
                                                           Millis connect_timeout, Millis op_timeout) const {
  ClientOptions co;
  // Node 0 talks to its own server over loopback: no dependence on how its name resolves.
  const bool wildcard =
      opts_.listen_host.empty() || opts_.listen_host == "0.0.0.0" || opts_.listen_host == "::";
  co.host = !server_ ? opts_.host : (wildcard ? std::string("127.0.0.1") : opts_.listen_host);
  co.port = port_;
  co.run_id = opts_.run_id;
  co.auth = opts_.auth;
  co.label = label;
  co.liveness = liveness;
  co.connect_timeout = connect_timeout;
  co.op_timeout = op_timeout;
  try {
    return std::make_shared<TcpStore>(std::move(co));
  } catch (const store::Error& e) {
    if (!server_) throw;
    // Name the endpoint the user gave, not our loopback shortcut.
    throw store::Error(e.kind(), fmt::format("rendezvous store {}: {}", endpoint(), e.what()), e.op(),
                       endpoint());
  }
}

void Rendezvous::Impl::ensure_connected() {
  if (client_ && client_->connected()) return;
  // Within a round the one connection is node 0: once it is gone, so is node 0. Only a
  // new round (next_attempt) connects again, and only a join waits for a node 0 to come up.
  if (client_ && round_.joined) {
    throw store::Error(store::Error::Kind::io,
                       fmt::format("rendezvous {}: the connection to the store is lost", endpoint()),
                       "connect", endpoint());
  }
  // Agents other than node 0 keep retrying while node 0 starts, up to the join timeout.
  // The handshake is pipelined with the first call, so a peer that never answers (not our store)
  // is noticed by that call: bound it by the join timeout too (--rdzv-timeout).
  if (!server_ && !opts_.fallback_ports.empty() && round_.failovers == 0) {
    client_ = find_store();
    return;
  }
  client_ = connect_client(labels::main_conn(opts_.node_rank), Millis{0}, opts_.join_timeout,
                           std::min(std::max(opts_.heartbeat_timeout, Millis{30000}), opts_.join_timeout));
}

// Node 0 serves on the store's port or, when that was busy on its node, on a fallback: try each in
// turn, round after round, until one answers for this run. Nothing listening (our node 0 may not be up
// yet) or another run's store (it refuses us by run id) sends us to the next; any other refusal is ours
// (authentication, version) and final. Only one store serves this run id, so every agent finds the same.
std::shared_ptr<TcpStore> Rendezvous::Impl::find_store() {
  std::vector<std::uint16_t> ports = {opts_.port};
  ports.insert(ports.end(), opts_.fallback_ports.begin(), opts_.fallback_ports.end());
  const auto start = Clock::now();
  const auto deadline = start + opts_.join_timeout;
  Backoff backoff(Millis{50}, Millis{1000}, Backoff::cheap_seed());
  std::vector<std::string> last(ports.size());
  // A port where another run's store answered is asked again only after a while: each asking costs that
  // store's node 0 a "rejected peer" line. It is asked again at all because that store may end, and ours
  // start there.
  std::vector<Clock::time_point> not_before(ports.size());
  for (;;) {
    for (std::size_t i = 0; i < ports.size(); ++i) {
      if (Clock::now() < not_before[i]) continue;
      ClientOptions co;
      co.host = opts_.host;
      co.port = ports[i];
      co.run_id = opts_.run_id;
      co.auth = opts_.auth;
      co.label = labels::main_conn(opts_.node_rank);
      co.one_round = true;
      co.wait_for_handshake = true;  // whose store it is, before it counts as ours
      co.op_timeout = std::min(std::max(opts_.heartbeat_timeout, Millis{30000}), opts_.join_timeout);
      co.connect_timeout = co.op_timeout;  // for the hello; one round either way
      try {
        auto c = std::make_shared<TcpStore>(std::move(co));
        port_ = ports[i];
        return c;
      } catch (const store::Error& e) {
        if (e.kind() == store::Error::Kind::rejected) throw;
        if (e.kind() == store::Error::Kind::other_run) not_before[i] = Clock::now() + Millis{10000};
        last[i] = fmt::format(
            "{}: {}", ports[i],
            e.kind() == store::Error::Kind::other_run ? "a store of another run" : "no store answered");
      }
    }
    const auto now = Clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(deadline - now, backoff.next()));
  }
  throw store::Error(
      store::Error::Kind::timeout,
      fmt::format("cannot reach the rendezvous store at {} on port {} or its fallback ports after {:.1f} s "
                  "({}); is node 0's agent running, and is the endpoint right?",
                  opts_.host, opts_.port, std::chrono::duration<double>(Clock::now() - start).count(),
                  fmt::join(last, "; ")),
      "connect", endpoint());
}

// ---- abort

core::Failure Rendezvous::Impl::abort(const core::Failure& cause_in) {
  core::Failure cause = cause_in;
  if (cause.time == core::FailureTime{}) cause.time = core::failure_now();
  try {
    const std::string mine = core::encode_failure(cause);
    auto lk = gate_.hold();
    if (gate_.waiting()) {
      lk.unlock();
      return abort_beside_barrier(mine);
    }
    // Held until the abort is in: a barrier starting meanwhile waits for it, never the other way round.
    ensure_connected();
    const std::string winner = store().compare_set(keys::kAbort, "", mine);
    if (winner == mine) return cause;
    return core::decode_failure(winner);
  } catch (const std::exception&) {
    return cause;
  }
}

core::Failure Rendezvous::Impl::abort(const core::Failure& cause_in, Millis bound) {
  const auto deadline = Clock::now() + bound;
  core::Failure cause = cause_in;
  if (cause.time == core::FailureTime{}) cause.time = core::failure_now();
  const std::string mine = core::encode_failure(cause);
  std::shared_ptr<TcpStore> conn;
  auto lk = gate_.hold();
  const bool beside = gate_.waiting();
  if (beside) {
    // The exit barrier holds the main connection (a stopping signal while this node waits there).
    lk.unlock();
    if (server_) return abort_beside_barrier(mine);  // in this process: answers at once
    try {
      conn = connect_client(labels::abort(opts_.node_rank), Millis{0}, bound, bound);
    } catch (const store::Error&) {
      end_barrier_wait();
      throw;
    }
  } else {
    // Held until the abort is in (or the bound is past): a barrier starting meanwhile waits for it.
    ensure_connected();
    conn = client_;
  }
  // The call runs beside this thread's wait; a store that has not answered by the bound gets its
  // connection closed, which ends the call at once.
  std::promise<std::string> answer;
  std::future<std::string> winner = answer.get_future();
  std::thread call([&answer, conn, prefix = key_prefix(), &mine] {
    try {
      answer.set_value(PrefixStore(prefix, conn).compare_set(keys::kAbort, "", mine));
    } catch (...) {
      answer.set_exception(std::current_exception());
    }
  });
  const bool in_time = winner.wait_for(detail::left_until(deadline)) == std::future_status::ready;
  if (!in_time) conn->close();
  call.join();
  try {
    if (!in_time) {
      throw store::Error(
          store::Error::Kind::timeout,
          fmt::format("the rendezvous store at {} did not answer within {} ms", endpoint(), bound.count()),
          "abort", endpoint(), keys::kAbort);
    }
    const std::string won = winner.get();  // throws the call's Error
    return won == mine ? cause : core::decode_failure(won);
  } catch (const store::Error&) {
    if (beside) end_barrier_wait();
    throw;
  }
}

std::optional<core::Failure> Rendezvous::Impl::aborted() {
  try {
    ensure_connected();
    if (auto v = store().get(keys::kAbort, Millis{0})) return core::decode_failure(*v);
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

void Rendezvous::Impl::next_attempt(const std::vector<int>& lost) {
  stop_watch();
  round_.end_round(lost);  // the one copy of the round that ended
  if (elastic_round()) {
    // Every survivor is back within its teardown: no round after a loss may wait --rdzv-timeout for a
    // node 0 that is gone too.
    opts_.join_timeout = std::min(opts_.join_timeout, 2 * opts_.rejoin_timeout);
  }
  // The connection stays; its liveness promise and label of this attempt go, or the store would
  // drop it while the next round gathers.
  try {
    if (client_ && client_->connected()) client_->watch(labels::main_conn(opts_.node_rank), Millis{0}, {});
  } catch (const store::Error&) {
    client_.reset();  // the next round connects afresh
  }
  ++opts_.attempt;
  clear_round();
}

// ---- Rendezvous: the API, forwarded to its state (rendezvous_impl.hpp)

Rendezvous::Rendezvous(RendezvousOptions o) : impl_(std::make_unique<Impl>(std::move(o))) {}
Rendezvous::~Rendezvous() = default;

std::uint16_t Rendezvous::port() const {
  return impl_->port();
}
bool Rendezvous::serving() const {
  return impl_->serving();
}
std::string Rendezvous::endpoint() const {
  return impl_->endpoint();
}
const std::vector<std::string>& Rendezvous::expected_hosts() const {
  return impl_->expected_hosts();
}
int Rendezvous::attempt() const {
  return impl_->attempt();
}
std::vector<std::string> Rendezvous::peer_hosts() const {
  return impl_->peer_hosts();
}
Joined Rendezvous::join(const JoinInfo& me, const PlanFn& make_plan) {
  return impl_->join(me, make_plan);
}
void Rendezvous::watch(std::function<void(const core::Failure&)> on_abort) {
  impl_->watch(std::move(on_abort));
}
core::Failure Rendezvous::abort(const core::Failure& cause) {
  return impl_->abort(cause);
}
core::Failure Rendezvous::abort(const core::Failure& cause, Millis bound) {
  return impl_->abort(cause, bound);
}
bool Rendezvous::node0_lost() const {
  return impl_->node0_lost();
}
std::optional<core::Failure> Rendezvous::aborted() {
  return impl_->aborted();
}
core::Failure Rendezvous::fail_start(const core::Failure& cause) {
  return impl_->fail_start(cause);
}
const std::optional<core::Failure>& Rendezvous::start_failure() const {
  return impl_->start_failure();
}
bool Rendezvous::barrier(const std::string& name, Millis timeout) {
  return impl_->barrier(name, timeout);
}
ExitBarrierEnd Rendezvous::exit_barrier() {
  return impl_->exit_barrier();
}
std::uint64_t Rendezvous::bytes_received() const {
  return impl_->bytes_received();
}
void Rendezvous::next_attempt(const std::vector<int>& lost) {
  impl_->next_attempt(lost);
}
const std::vector<core::Member>& Rendezvous::members() const {
  return impl_->members();
}
const std::vector<core::Member>& Rendezvous::previous_members() const {
  return impl_->previous_members();
}
const std::vector<int>& Rendezvous::previous_lost() const {
  return impl_->previous_lost();
}
void Rendezvous::fail_over(int host_rank, const std::string& addr, std::uint16_t port) {
  impl_->fail_over(host_rank, addr, port);
}
int Rendezvous::failovers() const {
  return impl_->failovers();
}
std::optional<core::Failure> Rendezvous::standby(const std::function<bool()>& stop) {
  return impl_->standby(stop);
}
bool Rendezvous::publish_result(const std::string& record) {
  return impl_->publish_result(record);
}
std::vector<ResultRecord> Rendezvous::gather_results(Millis timeout, std::optional<int> lost) {
  return impl_->gather_results(timeout, lost);
}
bool Rendezvous::try_write(const std::string& key, const std::string& value, WriteOptions how) {
  return impl_->try_write(key, value, how);
}
std::optional<std::string> Rendezvous::local_status(const std::string& key) {
  return impl_->local_status(key);
}
std::optional<std::string> Rendezvous::stacks_request() {
  return impl_->stacks_request();
}
void Rendezvous::drain(Millis limit) {
  impl_->drain(limit);
}

}  // namespace ddprun::rdzv
