#pragma once
// A simulated ddprun agent (node rank >= 1) as a few steps over sim::Conn, following what
// rendezvous/src/{join,liveness,barrier}.cpp do on a real agent (keys from rendezvous/src/keys.hpp):
//   connect + hello (token auth) -> join -> wait for and read the plan -> heartbeat/watch loop,
//   and meanwhile on the main connection, once the driver says go: publish an abort (one agent)
//   or the exit barrier.
// Two protocols: `main` (today's main: two connections per agent, main and the watch, a long poll
// on the abort key renewed every 250 ms that is the heartbeat) and `one-conn` (one connection, today's: from
// the arrival on, a watch op subscribes to the abort key, pushed as an event, and cheap heartbeat
// frames flow; see sim_mux_conn.hpp and docs/protocol.md).
#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <boost/asio/experimental/awaitable_operators.hpp>

#include "core/failure.hpp"
#include "sim_mux_conn.hpp"

namespace sim {

using Clock = std::chrono::steady_clock;
inline std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

enum class Scenario { abort, barrier };

struct Config {
  std::uint16_t port = 0;
  std::string run_id;
  std::string token;
  int nnodes = 0;
  int nproc = 8;
  Scenario scenario = Scenario::barrier;
  std::chrono::milliseconds hb_interval{250};  // the watch's renewal (RendezvousOptions default)
  std::uint32_t hb_timeout_ms = 5000;          // liveness promised in the watch's hello
  std::string prefix = "/attempt_0/";
  bool one_conn = true;          // today's protocol (docs/protocol.md); false: before issue 16
  int ramp_ms = 0;               // agents start spread over this long (0: all at once, the worst case)
  bool scattered_hosts = false;  // host names no hostlist folds (the plan's worst case)
  int gpus = 0;                  // GPU ids each agent reports in its join record ("0".."gpus-1")
  int abort_rank = 1;            // the simulated agent that publishes the abort (2 with --real-agent)
};

// The join record's GPU list: "0","1",... as CUDA_VISIBLE_DEVICES=0,1,... gives a real agent.
inline std::string sim_gpus(const Config& cfg) {
  std::string out;
  for (int g = 0; g < cfg.gpus; ++g) out += fmt::format("{}\"{}\"", g ? "," : "", g);
  return out;
}

// Agent `rank`'s host name: "sim<rank>" as on a cluster (they fold to "sim[1-N]"), or a scattered
// name that does not fold.
inline std::string sim_host(const Config& cfg, int rank) {
  if (!cfg.scattered_hosts) return fmt::format("sim{}", rank);
  return fmt::format("h{:08x}x", static_cast<std::uint32_t>(rank) * 2654435761u);
}

// Agent `rank` starts this long after the first (--ramp-ms).
inline awaitable<void> ramp(const Config& cfg, int rank) {
  if (cfg.ramp_ms <= 0) co_return;
  asio::steady_timer t(co_await asio::this_coro::executor);
  t.expires_after(std::chrono::milliseconds(static_cast<std::int64_t>(cfg.ramp_ms) * rank / cfg.nnodes));
  co_await t.async_wait(use_awaitable);
}

// rdzv::liveness_timing: the heartbeat interval grows with the job (<= 4000 heartbeats/s).
inline std::chrono::milliseconds heartbeat_interval_for(int nnodes) {
  return std::max(std::chrono::milliseconds(1000), std::chrono::milliseconds((nnodes * 1000 + 3999) / 4000));
}

struct Stat {
  std::int64_t plan_ns = 0, abort_ns = 0, barrier_ns = 0;
  std::uint64_t bytes = 0;     // every byte this agent received, on all its connections
  std::size_t plan_bytes = 0;  // the published plan's value
  std::string error;
};

// Wakes every coroutine of one io_context waiting on it (fire() from any thread).
struct Gate {
  explicit Gate(asio::io_context& io) : t(io, Clock::time_point::max()) {}
  awaitable<void> wait() {
    while (!open) {
      boost::system::error_code ec;
      co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
    }
  }
  void fire() {
    asio::post(t.get_executor(), [this] {
      open = true;
      t.cancel();
    });
  }
  asio::steady_timer t;
  bool open = false;
};

struct Run {
  Config cfg;
  std::vector<Stat> stats;  // by node rank; each touched only by its agent until finished
  std::atomic<int> plans{0}, finished{0}, failed{0};
  std::atomic<std::int64_t> abort_t0{0};
  std::atomic<int> aborts_seen{0};  // one-conn agents holding the abort, still connected
};

inline proto::Request req(proto::Op op, std::string key, std::string value = {}) {
  proto::Request r;
  r.op = op;
  r.key = std::move(key);
  r.value = std::move(value);
  return r;
}

// The steps every agent takes on its main connection (join.cpp, barrier.cpp), for either
// connection type.
template <typename C>
class Steps {
 public:
  Steps(const Config& cfg, int rank, C& c) : cfg_(cfg), rank_(rank), c_(c) {}
  std::string key(const std::string& k) const { return cfg_.prefix + k; }

  awaitable<Answer> call(proto::Request r) {
    Answer a = co_await c_.call(r);
    if (a.status == proto::Status::error)
      throw std::runtime_error(fmt::format("{} {}: {}", proto::to_string(r.op), r.key, a.value));
    co_return a;
  }
  awaitable<std::int64_t> add(const std::string& k, std::int64_t d) {
    proto::Request r = req(proto::Op::add, key(k));
    r.number = d;
    const Answer a = co_await call(r);
    co_return a.number;
  }
  awaitable<void> set(const std::string& k, std::string v) {
    co_await call(req(proto::Op::set, key(k), std::move(v)));
  }
  awaitable<Answer> wait_any(std::vector<std::string> ks, std::uint64_t timeout_ms) {
    proto::Request r = req(proto::Op::wait_any, {});
    for (auto& k : ks) r.keys.push_back(key(k));
    r.timeout_ms = timeout_ms;
    co_return co_await call(r);
  }

  // Claim the node rank, publish the join record, count the arrival.
  awaitable<void> join() {
    if (co_await add(fmt::format("rank/{}", rank_), 1) > 1) throw std::runtime_error("node rank taken");
    co_await set(
        fmt::format("node/{}", rank_),
        fmt::format(
            R"({{"addr":"{}","gpus":[{}],"hostname":"{}","local_world_size":{},"node_rank":{},"spare":false}})",
            sim_host(cfg_, rank_), sim_gpus(cfg_), sim_host(cfg_, rank_), cfg_.nproc, rank_));
    const std::int64_t n = co_await add("arrivals", 1);
    co_await set(fmt::format("arrived/{}", n), std::to_string(rank_));
  }

  // Returns the plan's size in bytes.
  awaitable<std::size_t> read_plan() {
    std::vector<std::string> ks{"plan", "join_error"};  // named: GCC 12 fumbles braced lists in co_await
    const Answer got = co_await wait_any(std::move(ks), 600000);
    if (got.status != proto::Status::ok) throw std::runtime_error("no plan in time");
    if (got.number == 1) throw std::runtime_error("join error on the master");
    const Answer plan = co_await call(req(proto::Op::get, key("plan")));
    if (plan.status != proto::Status::ok) throw std::runtime_error("plan vanished");
    co_return plan.value_size;
  }

  awaitable<void> publish_abort(std::atomic<std::int64_t>& t0) {
    ddprun::core::Failure f;
    f.host = fmt::format("sim{}", rank_);
    f.node_rank = rank_;
    f.rank = rank_ * cfg_.nproc;
    f.local_rank = 0;
    f.exit_code = 3;
    f.reason = "exited with code 3 (simulated)";
    f.time = ddprun::core::failure_now();
    proto::Request r = req(proto::Op::compare_set, key("abort"), "");
    r.value2 = ddprun::core::encode_failure(f);
    t0.store(now_ns());
    co_await call(r);
  }

  // The exit barrier up to "done" (the caller stops watching, then acknowledges).
  awaitable<void> barrier_wait() {
    co_await set(fmt::format("left/{}", rank_), "1");
    if (co_await add("barrier/exit/count", 1) >= cfg_.nnodes) co_await set("barrier/exit/done", "1");
    std::vector<std::string> ks{"barrier/exit/done", "abort"};
    const Answer a = co_await wait_any(std::move(ks), 120000);
    if (a.status != proto::Status::ok || a.number != 0) throw std::runtime_error("exit barrier failed");
  }
  awaitable<void> barrier_ack() { co_await set(fmt::format("barrier/exit/ack/{}", rank_), "1"); }

 private:
  const Config& cfg_;
  int rank_;
  C& c_;
};

class Agent {
 public:
  virtual ~Agent() = default;
  virtual awaitable<void> run() = 0;
};

// Both branches of `a && b` failed: the first one's error says what happened.
inline std::string first_error(const std::exception_ptr& p) {
  try {
    std::rethrow_exception(p);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

// Today's main: a main connection and a watch connection (liveness.cpp).
class AgentTwoConns : public Agent {
 public:
  AgentTwoConns(asio::io_context& io, Run& run, Gate& go, int rank)
      : run_(run),
        cfg_(run.cfg),
        go_(go),
        rank_(rank),
        st_(run.stats[static_cast<std::size_t>(rank)]),
        main_(io, st_.bytes),
        watch_(io, st_.bytes),
        steps_(cfg_, rank, main_) {}

  awaitable<void> run() override {
    using namespace asio::experimental::awaitable_operators;
    try {
      co_await ramp(cfg_, rank_);
      co_await main_.open(cfg_.port, cfg_.run_id, cfg_.token, fmt::format("main/{}", rank_), 0);
      co_await steps_.join();
      st_.plan_bytes = co_await steps_.read_plan();
      st_.plan_ns = now_ns();
      run_.plans.fetch_add(1);
      co_await watch_.open(cfg_.port, cfg_.run_id, cfg_.token, fmt::format("agent/0/{}", rank_),
                           cfg_.hb_timeout_ms);
      co_await (watch_loop() && main_after_go());
    } catch (const asio::multiple_exceptions& e) {
      st_.error = first_error(e.first_exception());
      run_.failed.fetch_add(1);
    } catch (const std::exception& e) {
      st_.error = e.what();
      run_.failed.fetch_add(1);
    }
    main_.close();
    watch_.close();
    run_.finished.fetch_add(1);
  }

 private:
  // The heartbeat: a long poll on the abort key, renewed every interval.
  awaitable<void> watch_loop() {
    try {
      for (;;) {
        proto::Request r = req(proto::Op::wait_any, {});
        r.keys.push_back(cfg_.prefix + "abort");
        r.timeout_ms = static_cast<std::uint64_t>(cfg_.hb_interval.count());
        const Answer a = co_await watch_.call(r);
        if (leaving_) co_return;
        if (a.status == proto::Status::ok) {
          st_.abort_ns = now_ns();
          co_return;
        }
      }
    } catch (const std::exception&) {
      if (!leaving_) throw;
    }
  }

  awaitable<void> main_after_go() {
    co_await go_.wait();
    if (cfg_.scenario == Scenario::abort) {
      if (rank_ == cfg_.abort_rank) co_await steps_.publish_abort(run_.abort_t0);
      co_return;
    }
    co_await steps_.barrier_wait();
    st_.barrier_ns = now_ns();
    leaving_ = true;
    co_await steps_.barrier_ack();
    watch_.close();
  }

  Run& run_;
  const Config& cfg_;
  Gate& go_;
  int rank_;
  Stat& st_;
  Conn main_;
  Conn watch_;
  Steps<Conn> steps_;
  bool leaving_ = false;
};

// One connection: the abort arrives as an event; heartbeat frames at the interval the job size gives.
class AgentOneConn : public Agent {
 public:
  AgentOneConn(asio::io_context& io, Run& run, Gate& go, Gate& leave, int rank)
      : run_(run),
        cfg_(run.cfg),
        go_(go),
        leave_(leave),
        rank_(rank),
        st_(run.stats[static_cast<std::size_t>(rank)]),
        conn_(io, st_.bytes),
        steps_(cfg_, rank, conn_),
        beat_(io),
        ended_(io) {}

  awaitable<void> run() override {
    using namespace asio::experimental::awaitable_operators;
    try {
      co_await ramp(cfg_, rank_);
      co_await conn_.open(cfg_.port, cfg_.run_id, cfg_.token, fmt::format("main/{}", rank_), 0,
                          [this](const Answer& a) { on_event(a); });
      co_await steps_.join();
      // The watch and the heartbeats start at arrival, before the plan.
      const auto interval = heartbeat_interval_for(cfg_.nnodes);
      const auto t_agent = std::max<std::int64_t>(cfg_.hb_timeout_ms, 3 * interval.count());
      std::vector<std::string> keys{cfg_.prefix + "abort"};
      const Answer w = co_await conn_.call_frame(
          watch_frame(fmt::format("agent/0/{}", rank_), static_cast<std::uint64_t>(t_agent), keys));
      if (w.status != proto::Status::ok) throw std::runtime_error("watch refused: " + w.value);
      co_await (heartbeats(interval) && plan_then_go());
    } catch (const asio::multiple_exceptions& e) {
      st_.error = first_error(e.first_exception());
      run_.failed.fetch_add(1);
    } catch (const std::exception& e) {
      st_.error = e.what();
      run_.failed.fetch_add(1);
    }
    done_ = true;
    beat_.cancel();
    conn_.close();
    run_.finished.fetch_add(1);
  }

 private:
  void on_event(const Answer& a) {
    if (a.number == 0 && a.status == static_cast<proto::Status>(kStatusEvent) && st_.abort_ns == 0) {
      st_.abort_ns = now_ns();
    }
    if (a.number < 0 && !leaving_) lost_ = true;
    ended_.cancel();
  }

  awaitable<void> heartbeats(std::chrono::milliseconds interval) {
    while (!done_ && !leaving_ && !conn_.closed() && st_.abort_ns == 0) {
      beat_.expires_after(interval);
      boost::system::error_code ec;
      co_await beat_.async_wait(asio::redirect_error(use_awaitable, ec));
      // A pong is asked for on every third heartbeat only.
      if (!done_ && !leaving_ && !conn_.closed()) conn_.heartbeat(++beats_ % 3 == 0);
    }
  }

  awaitable<void> plan_then_go() {
    st_.plan_bytes = co_await steps_.read_plan();
    st_.plan_ns = now_ns();
    run_.plans.fetch_add(1);
    co_await main_after_go();
  }

  awaitable<void> main_after_go() {
    co_await go_.wait();
    if (cfg_.scenario == Scenario::abort) {
      if (rank_ == cfg_.abort_rank) co_await steps_.publish_abort(run_.abort_t0);
      while (st_.abort_ns == 0 && !lost_) {
        boost::system::error_code ec;
        ended_.expires_at(Clock::time_point::max());
        co_await ended_.async_wait(asio::redirect_error(use_awaitable, ec));
      }
      beat_.cancel();
      if (lost_ && st_.abort_ns == 0) throw std::runtime_error("lost the master before the abort");
      // Connected until every agent has the abort: 16k closes on the simulator's one thread would
      // delay the agents still reading it, where real agents close on their own nodes.
      run_.aborts_seen.fetch_add(1);
      co_await leave_.wait();
      co_return;
    }
    co_await steps_.barrier_wait();
    st_.barrier_ns = now_ns();
    leaving_ = true;
    beat_.cancel();
    // As a real agent (rendezvous/src/barrier.cpp): once the barrier passed, an ack the master no
    // longer answers is no failure.
    try {
      co_await steps_.barrier_ack();
    } catch (const std::exception&) {
    }
  }

  Run& run_;
  const Config& cfg_;
  Gate& go_;
  Gate& leave_;
  int rank_;
  Stat& st_;
  MuxConn conn_;
  Steps<MuxConn> steps_;
  asio::steady_timer beat_;
  asio::steady_timer ended_;
  bool leaving_ = false, lost_ = false, done_ = false;
  unsigned beats_ = 0;
};

}  // namespace sim
