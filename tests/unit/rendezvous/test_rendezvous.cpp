// The rendezvous with agents as threads in one process (multi-process runs: tests/loopback).
#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "core/json.hpp"

#include "rendezvous/plan_record.hpp"
#include "rendezvous/rendezvous.hpp"
#include "store/client.hpp"
#include "store/error.hpp"
#include "support/net_util.hpp"
#include "support/simple_plan.hpp"

using namespace ddprun;
using namespace ddprun::rdzv;
using namespace std::chrono_literals;

namespace {

PlanFn simple_plan(int master_port = 0) {
  return testplan::plan_fn([master_port](const std::vector<core::NodeSpec>& nodes) {
    return testplan::simple_plan(nodes, master_port);
  });
}

using testplan::join_plan;

RendezvousOptions opts_for(int node_rank, int nmin, int nmax, std::uint16_t port,
                           const std::string& run_id = "run") {
  RendezvousOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.run_id = run_id;
  o.node_rank = node_rank;
  o.nnodes_min = nmin;
  o.nnodes_max = nmax;
  o.join_timeout = 20s;
  o.last_call = 300ms;
  o.heartbeat_interval = 50ms;
  o.heartbeat_timeout = 1000ms;
  return o;
}

JoinInfo me(int node_rank, int lws = 2) {
  return {node_rank, fmt::format("host-{}", node_rank), "127.0.0.1", lws, {}};
}

template <typename T>
T get_bounded(std::future<T>& f, std::chrono::seconds limit = 30s) {
  REQUIRE(f.wait_for(limit) == std::future_status::ready);
  return f.get();
}

// Agents 1..n-1 (and node 0, first) join concurrently; returns their plans by node rank.
struct Job {
  std::vector<std::unique_ptr<Rendezvous>> agents;
  std::vector<test::Plan> plans;

  Job(int n, PlanFn fn = simple_plan(), int nmin = -1, std::chrono::milliseconds heartbeat_timeout = 1000ms) {
    if (nmin < 0) nmin = n;
    auto opts = [&](int r, std::uint16_t port) {
      RendezvousOptions o = opts_for(r, nmin, n, port);
      o.heartbeat_timeout = heartbeat_timeout;
      return o;
    };
    agents.push_back(std::make_unique<Rendezvous>(opts(0, 0)));
    const std::uint16_t port = agents[0]->port();
    for (int r = 1; r < n; ++r) agents.push_back(std::make_unique<Rendezvous>(opts(r, port)));
    std::vector<std::future<test::Plan>> futs;
    for (int r = 0; r < n; ++r) {
      futs.push_back(std::async(std::launch::async, [this, r, fn] {
        return join_plan(*agents[static_cast<std::size_t>(r)], me(r), fn);
      }));
    }
    for (auto& f : futs) plans.push_back(get_bounded(f));
  }
  // Non-masters first: a node 0 going down after an abort waits for the others to leave.
  ~Job() {
    while (!agents.empty()) agents.pop_back();
  }
};

// Collects the abort each agent's watch reports.
struct AbortSink {
  std::mutex mu;
  std::map<int, core::Failure> got;
  std::map<int, int> calls;
  std::function<void(const core::Failure&)> for_agent(int r) {
    return [this, r](const core::Failure& a) {
      std::lock_guard lk(mu);
      got[r] = a;
      ++calls[r];
    };
  }
  bool wait_for(std::size_t n, std::chrono::seconds limit = 20s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      {
        std::lock_guard lk(mu);
        if (got.size() >= n) return true;
      }
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }
};

}  // namespace

TEST_CASE("rendezvous: 2 to 16 agents agree on one plan", "[rendezvous]") {
  for (int n : {2, 5, 16}) {
    INFO(n << " agents");
    Job job(n);
    for (int r = 0; r < n; ++r) {
      const auto& p = job.plans[static_cast<std::size_t>(r)];
      CHECK(p.node_rank == r);
      CHECK(p.nnodes == n);
      CHECK(p.world_size == 2 * n);
      REQUIRE(p.workers.size() == static_cast<std::size_t>(2 * n));
      for (const auto& w : p.workers) {
        CHECK(w.env.at("MASTER_PORT") == std::to_string(p.master_port));
        CHECK(w.host == fmt::format("host-{}", w.node_rank));
      }
      // Identical plan everywhere, apart from which node it is for.
      CHECK(test::plan_to_json(p)["workers"] == test::plan_to_json(job.plans[0])["workers"]);
      CHECK(p.master_port == job.plans[0].master_port);
    }
  }
}

TEST_CASE("rendezvous: MIN:MAX closes after the last call and renumbers node ranks", "[rendezvous]") {
  // nnodes 2:4; node ranks 0, 1 and 3 come, 2 never does.
  auto m = std::make_unique<Rendezvous>(opts_for(0, 2, 4, 0));
  const auto port = m->port();
  Rendezvous a1(opts_for(1, 2, 4, port));
  Rendezvous a3(opts_for(3, 2, 4, port));
  auto f0 = std::async(std::launch::async, [&] { return join_plan(*m, me(0, 1), simple_plan()); });
  auto f1 = std::async(std::launch::async, [&] { return join_plan(a1, me(1, 1), simple_plan()); });
  auto f3 = std::async(std::launch::async, [&] { return join_plan(a3, me(3, 1), simple_plan()); });
  const auto p0 = get_bounded(f0);
  const auto p1 = get_bounded(f1);
  const auto p3 = get_bounded(f3);
  CHECK(p0.nnodes == 3);
  CHECK(p0.node_rank == 0);
  CHECK(p1.node_rank == 1);
  CHECK(p3.node_rank == 2);  // renumbered
  REQUIRE(p3.workers.size() == 3);
  CHECK(p3.workers[2].host == "host-3");
  CHECK(p3.workers[2].node_rank == 2);
}

TEST_CASE("rendezvous: a late agent after the round closed gets a clear error", "[rendezvous]") {
  auto m = std::make_unique<Rendezvous>(opts_for(0, 1, 2, 0));
  const auto plan = join_plan(*m, me(0), simple_plan());
  CHECK(plan.nnodes == 1);
  Rendezvous late(opts_for(1, 1, 2, m->port()));
  try {
    join_plan(late, me(1), simple_plan());
    FAIL("late agent joined a closed round");
  } catch (const store::Error& e) {
    CHECK(std::string(e.what()).find("closed without this node") != std::string::npos);
  }
}

TEST_CASE("rendezvous: a duplicate node rank is rejected, naming who holds it", "[rendezvous]") {
  Rendezvous m(opts_for(0, 3, 3, 0));
  Rendezvous a(opts_for(1, 3, 3, m.port()));
  Rendezvous dup(opts_for(1, 3, 3, m.port()));
  auto fm = std::async(std::launch::async, [&] { return join_plan(m, me(0), simple_plan()); });
  auto fa = std::async(std::launch::async, [&] { return join_plan(a, me(1), simple_plan()); });
  {
    // `a` holds rank 1 once its join record is in the store.
    store::ClientOptions co;
    co.port = m.port();
    co.run_id = "run";
    store::TcpStore peek(co);
    REQUIRE(peek.wait({"/attempt_0/node/1"}, 20s));
  }
  try {
    dup.join(JoinInfo{1, "intruder", "127.0.0.1", 1, {}}, simple_plan());
    FAIL("duplicate node rank accepted");
  } catch (const store::Error& e) {
    const std::string what = e.what();
    CHECK(e.kind() == store::Error::Kind::rejected);
    CHECK(what.find("node rank 1 is already taken by host host-1") != std::string::npos);
  }
  // The round is not disturbed: it completes once node 2 arrives.
  Rendezvous a2(opts_for(2, 3, 3, m.port()));
  CHECK(join_plan(a2, me(2), simple_plan()).nnodes == 3);
  CHECK(get_bounded(fm).nnodes == 3);
  const auto pa = get_bounded(fa);
  CHECK(pa.workers[2].host == "host-1");
}

TEST_CASE("rendezvous: an agent from another run is refused", "[rendezvous]") {
  Rendezvous m(opts_for(0, 2, 2, 0, "job-A"));
  auto o = opts_for(1, 2, 2, m.port(), "job-B");
  Rendezvous other(o);
  try {
    join_plan(other, me(1), simple_plan());
    FAIL("joined a store of another run");
  } catch (const store::Error& e) {
    const std::string what = e.what();
    CHECK(e.kind() == store::Error::Kind::other_run);
    CHECK(what.find("job-A") != std::string::npos);
    CHECK(what.find("job-B") != std::string::npos);
  }
}

TEST_CASE(
    "rendezvous: a store port held by another run's store: the master serves on a fallback, its agents "
    "find it there, and neither run meets the other",
    "[rendezvous]") {
  // Run A serves on port P; run B derived the same port (a colliding JOBID.STEPID).
  Rendezvous a0(opts_for(0, 2, 2, 0, "run-A"));
  const std::uint16_t p = a0.port();
  const std::uint16_t fallback = [] {  // a port that was free a moment ago
    Rendezvous probe(opts_for(0, 1, 1, 0, "probe"));
    return probe.port();
  }();
  auto b_opts = [&](int r) {
    RendezvousOptions o = opts_for(r, 2, 2, p, "run-B");
    o.fallback_ports = {fallback};
    return o;
  };
  Rendezvous b0(b_opts(0));
  CHECK(b0.port() == fallback);
  Rendezvous b1(b_opts(1));
  Rendezvous a1(opts_for(1, 2, 2, p, "run-A"));
  auto fb0 = std::async(std::launch::async, [&] { return join_plan(b0, me(0), simple_plan()); });
  auto fb1 = std::async(std::launch::async, [&] { return join_plan(b1, me(1), simple_plan()); });
  auto fa0 = std::async(std::launch::async, [&] { return join_plan(a0, me(0), simple_plan()); });
  auto fa1 = std::async(std::launch::async, [&] { return join_plan(a1, me(1), simple_plan()); });
  for (auto* f : {&fb0, &fb1, &fa0, &fa1}) CHECK(get_bounded(*f).nnodes == 2);
  CHECK(b1.port() == fallback);
  CHECK(a1.port() == p);
}

TEST_CASE(
    "rendezvous: without fallbacks a busy store port is one error, and with them every port busy is one "
    "error too",
    "[rendezvous]") {
  Rendezvous a0(opts_for(0, 1, 1, 0, "run-A"));
  Rendezvous c0(opts_for(0, 1, 1, 0, "run-C"));
  CHECK_THROWS_WITH(Rendezvous(opts_for(0, 1, 1, a0.port(), "run-B")),
                    Catch::Contains("cannot serve the rendezvous store"));
  auto o = opts_for(0, 1, 1, a0.port(), "run-B");
  o.fallback_ports = {c0.port()};
  CHECK_THROWS_WITH(Rendezvous(o),
                    Catch::Contains(fmt::format("nor on its 1 fallback ports ({})", c0.port())));
}

TEST_CASE("rendezvous: a missed join deadline names the endpoint and the missing nodes", "[rendezvous]") {
  auto mo = opts_for(0, 3, 3, 0);
  mo.join_timeout = 500ms;
  mo.expected_hosts = {"node-a", "node-b", "node-c"};
  Rendezvous m(mo);
  auto ao = opts_for(1, 3, 3, m.port());
  ao.join_timeout = 10s;  // node 0's verdict reaches it first
  Rendezvous a(ao);
  auto fa = std::async(std::launch::async, [&]() -> std::string {
    try {
      join_plan(a, me(1), simple_plan());
      return "joined";
    } catch (const store::Error& e) {
      return e.what();
    }
  });
  try {
    join_plan(m, me(0), simple_plan());
    FAIL("round completed with a node missing");
  } catch (const store::Error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find(m.endpoint()) != std::string::npos);
    CHECK(what.find("node-c (node rank 2)") != std::string::npos);
    CHECK(what.find("node-b") == std::string::npos);  // it arrived
  }
  const std::string other = get_bounded(fa);
  CHECK(other.find("node-c (node rank 2)") != std::string::npos);

  // Without node 0 at all: the agent's error names the endpoint.
  auto lonely = opts_for(1, 2, 2, testnet::unused_port());
  lonely.join_timeout = 300ms;
  Rendezvous l(lonely);
  try {
    join_plan(l, me(1), simple_plan());
    FAIL("joined without a master");
  } catch (const store::Error& e) {
    CHECK(std::string(e.what()).find(fmt::format("127.0.0.1:{}", lonely.port)) != std::string::npos);
  }
}

TEST_CASE("rendezvous: missing nodes are named by host where known", "[rendezvous]") {
  CHECK(describe_missing({0, 2}, 4, {"a", "b"}) == "b (node rank 1), node rank 3");
}

TEST_CASE("rendezvous: the store's refusals are named by address, claimed node rank and reason",
          "[rendezvous]") {
  CHECK(describe_refusals({}).empty());
  CHECK(describe_refusals({{"10.0.0.8", "main/1", "authentication failed: wrong token", 3}}) ==
        "this store refused 3 connections from 10.0.0.8 as node rank 1: authentication failed: wrong token");
  CHECK(
      describe_refusals({{"10.0.0.8", "main/1", "wrong token", 1},
                         {"10.0.0.9", "top", "run id mismatch", 1},
                         {"::1", "", "protocol version 9", 2}}) ==
      "this store refused 1 connection from 10.0.0.8 as node rank 1: wrong token; 1 connection from 10.0.0.9 "
      "('top'): run id mismatch; 2 connections from ::1: protocol version 9");
}

TEST_CASE("rendezvous: make_plan sees the joined nodes in node-rank order", "[rendezvous]") {
  std::vector<int> seen;
  Job job(3, [&seen](const std::vector<JoinInfo>& joined) {
    for (const auto& j : joined) seen.push_back(j.node_rank);
    return core::dump_json(test::plan_to_json(testplan::simple_plan(testplan::nodes_of(joined), 0)));
  });
  CHECK(seen == std::vector<int>{0, 1, 2});
  CHECK(job.plans[2].node_rank == 2);
}

TEST_CASE("rendezvous: the first abort wins and reaches every agent", "[rendezvous]") {
  Job job(4);
  AbortSink sink;
  for (int r = 0; r < 4; ++r) job.agents[static_cast<std::size_t>(r)]->watch(sink.for_agent(r));
  core::Failure first;
  first.reason = "worker exited with code 3";
  first.host = "host-2";
  first.node_rank = 2;
  first.rank = 5;
  first.exit_code = 3;
  const core::Failure won = job.agents[2]->abort(first);
  CHECK(won.exit_code == 3);
  core::Failure second = first;
  second.exit_code = 4;
  second.node_rank = 3;
  const core::Failure lost_race = job.agents[3]->abort(second);
  CHECK(lost_race.exit_code == 3);  // learns the root cause instead
  REQUIRE(sink.wait_for(4));
  std::lock_guard lk(sink.mu);
  for (int r = 0; r < 4; ++r) {
    CHECK(sink.got[r].exit_code == 3);
    CHECK(sink.got[r].rank == 5);
    CHECK(sink.got[r].host == "host-2");
    CHECK(sink.calls[r] == 1);
  }
  CHECK(job.agents[1]->aborted().has_value());
  // The bounded form, as an agent's supervisor publishes: the same winner.
  CHECK(job.agents[1]->abort(second, 5s).exit_code == 3);
}

TEST_CASE("rendezvous: a bounded abort gives up on a store that does not answer, and says so",
          "[rendezvous]") {
  testnet::SilentListener silent;  // a node 0 that is stopped, or behind a network that drops everything
  Rendezvous agent(opts_for(1, 2, 2, silent.port));
  core::Failure f;
  f.reason = "exited with code 7";
  f.rank = 1;
  f.exit_code = 7;
  bool thrown = false;
  try {
    agent.abort(f, 300ms);
  } catch (const store::Error& e) {
    thrown = true;
    CHECK(e.kind() == store::Error::Kind::timeout);
    CHECK_THAT(e.what(), Catch::Contains("127.0.0.1:" + std::to_string(silent.port)) &&
                             Catch::Contains("did not answer within 300 ms"));
  }
  CHECK(thrown);
}

TEST_CASE("rendezvous: a lost agent aborts everyone else, naming it", "[rendezvous]") {
  Job job(3);
  AbortSink sink;
  for (int r = 0; r < 3; ++r) job.agents[static_cast<std::size_t>(r)]->watch(sink.for_agent(r));
  job.agents[2].reset();  // its connections drop without a barrier: it died
  REQUIRE(sink.wait_for(2));
  std::lock_guard lk(sink.mu);
  for (int r : {0, 1}) {
    INFO(sink.got[r].reason);
    CHECK(sink.got[r].node_rank == 2);
    CHECK(sink.got[r].host == "host-2");
    CHECK(sink.got[r].exit_code == 1);
    CHECK(sink.got[r].reason.find("lost the agent on host-2") != std::string::npos);
  }
}

TEST_CASE("rendezvous: an agent whose watch is gone right after the plan is lost after the heartbeat timeout",
          "[rendezvous]") {
  Job job(3);
  AbortSink sink;
  const auto start = std::chrono::steady_clock::now();
  // Heartbeats start by themselves at the join; leaving the attempt drops this one's watch while
  // its connection stays: only node 0's check of every participant's watch notices.
  job.agents[2]->next_attempt();
  for (int r : {0, 1}) job.agents[static_cast<std::size_t>(r)]->watch(sink.for_agent(r));
  REQUIRE(sink.wait_for(2));
  CHECK(std::chrono::steady_clock::now() - start < 10s);  // heartbeat timeout: 1 s
  std::lock_guard lk(sink.mu);
  for (int r : {0, 1}) {
    INFO(sink.got[r].reason);
    CHECK(sink.got[r].node_rank == 2);
    CHECK(sink.got[r].reason.find("lost the agent on host-2 (node rank 2): no heartbeat") !=
          std::string::npos);
  }
}

TEST_CASE("rendezvous: after an abort the master does not wait for an agent it lost", "[rendezvous]") {
  Job job(3, simple_plan(), -1, 4000ms);
  AbortSink sink;
  for (int r = 0; r < 3; ++r) job.agents[static_cast<std::size_t>(r)]->watch(sink.for_agent(r));
  // Its watch closes, its main connection stays open: how a stopped agent looks to node 0.
  job.agents[2]->next_attempt();
  REQUIRE(sink.wait_for(2));
  job.agents[1].reset();
  const auto start = std::chrono::steady_clock::now();
  job.agents[0].reset();
  // Not the drain's limit (the heartbeat timeout, 4 s): nobody is left to read the root cause.
  CHECK(std::chrono::steady_clock::now() - start < 2s);
}

TEST_CASE("rendezvous: a lost master is noticed by every agent", "[rendezvous]") {
  Job job(3);
  AbortSink sink;
  for (int r = 1; r < 3; ++r) job.agents[static_cast<std::size_t>(r)]->watch(sink.for_agent(r));
  job.agents[0].reset();
  REQUIRE(sink.wait_for(2));
  std::lock_guard lk(sink.mu);
  for (int r : {1, 2}) {
    CHECK(sink.got[r].node_rank == 0);
    CHECK(sink.got[r].reason.find("lost the rendezvous store") != std::string::npos);
  }
}

TEST_CASE("rendezvous: an agent that cannot start ends the first round on every agent, with its cause",
          "[rendezvous]") {
  const int bad = GENERATE(0, 1);  // node 0 itself, or another agent
  std::atomic<int> held{0};
  auto opts = [&held](int r, std::uint16_t port) {
    RendezvousOptions o = opts_for(r, 3, 3, port);
    o.nagents = 3;
    o.join_timeout = 120s;  // longer than the test waits: every agent must leave because all have read it
    o.on_start_failure = [&held] { ++held; };
    return o;
  };
  std::vector<std::unique_ptr<Rendezvous>> agents;
  agents.push_back(std::make_unique<Rendezvous>(opts(0, 0)));
  for (int r = 1; r < 3; ++r) agents.push_back(std::make_unique<Rendezvous>(opts(r, agents[0]->port())));
  core::Failure cause;
  cause.host = fmt::format("host-{}", bad);
  cause.node_rank = bad;
  cause.exit_code = 2;
  cause.fatal = true;
  cause.reason = "--nproc-per-node gpu: no GPUs are visible";
  // Catch's assertions are not thread-safe (TSan): each agent's thread returns what it saw.
  struct Seen {
    int code = 0;
    bool join_error = true;
    std::string what;
  };
  std::vector<std::future<Seen>> seen;
  for (int r = 0; r < 3; ++r) {
    seen.push_back(std::async(std::launch::async, [&, r]() -> Seen {
      Rendezvous& a = *agents[static_cast<std::size_t>(r)];
      if (r == bad) return {a.fail_start(cause).exit_code, true, {}};
      try {
        join_plan(a, me(r), simple_plan());
      } catch (const Error& e) {  // the failed round: the rendezvous's own error
        return {a.start_failure() ? a.start_failure()->exit_code : -1, true, e.what()};
      } catch (const store::Error& e) {
        return {a.start_failure() ? a.start_failure()->exit_code : -1, false, e.what()};
      }
      return {-2, false, {}};  // joined a round that one agent never came to
    }));
  }
  for (int r = 0; r < 3; ++r) {
    const Seen s = get_bounded(seen[static_cast<std::size_t>(r)], 60s);
    INFO("agent " << r << ": " << s.what);
    CHECK(s.code == 2);
    CHECK(s.join_error);
    if (r != bad) {
      CHECK_THAT(s.what,
                 Catch::Contains(fmt::format("host-{} (node rank {}) could not start: --nproc-per-node "
                                             "gpu: no GPUs are visible",
                                             bad, bad)));
    }
  }
  CHECK(held == 3);
  while (!agents.empty()) agents.pop_back();
}

TEST_CASE("rendezvous: exit barrier passes for all, and is bounded", "[rendezvous]") {
  Job job(3);
  AbortSink sink;
  for (int r = 0; r < 3; ++r) job.agents[static_cast<std::size_t>(r)]->watch(sink.for_agent(r));
  std::vector<std::future<bool>> fs;
  for (int r = 0; r < 3; ++r) {
    fs.push_back(std::async(std::launch::async, [&, r] {
      return job.agents[static_cast<std::size_t>(r)]->barrier("exit", 20s);
    }));
  }
  for (auto& f : fs) CHECK(get_bounded(f));
  // Agents leaving after the barrier is not a failure.
  job.agents[2].reset();
  job.agents[1].reset();
  std::this_thread::sleep_for(200ms);
  {
    std::lock_guard lk(sink.mu);
    CHECK(sink.got.empty());
  }

  Job partial(2);
  CHECK_FALSE(partial.agents[1]->barrier("exit", 200ms));  // node 0 never arrives
}

TEST_CASE("rendezvous: the exit barrier waits for the job's outcome and returns its root cause",
          "[rendezvous]") {
  core::Failure cause;
  cause.host = "host-2";
  cause.node_rank = 2;
  cause.rank = 5;
  cause.exit_code = 3;
  cause.reason = "exited with code 3";
  SECTION("passed by every node: no root cause") {
    Job job(2);
    std::vector<std::future<ExitBarrierEnd>> fs;
    for (auto& a : job.agents)
      fs.push_back(std::async(std::launch::async, [&a] { return a->exit_barrier(); }));
    for (auto& f : fs) CHECK_FALSE(get_bounded(f).root.has_value());
  }
  SECTION("a node that fails later ends the wait of those that finished, with its cause") {
    Job job(3);
    std::vector<std::future<ExitBarrierEnd>> fs;
    for (int r : {0, 1}) {
      fs.push_back(std::async(std::launch::async,
                              [&job, r] { return job.agents[static_cast<std::size_t>(r)]->exit_barrier(); }));
    }
    CHECK(fs[0].wait_for(300ms) == std::future_status::timeout);  // no bound of its own: it waits
    job.agents[2]->abort(cause);
    for (auto& f : fs) {
      const auto end = get_bounded(f);
      REQUIRE(end.root.has_value());
      CHECK(end.from_store);
      CHECK(end.root->rank == 5);
      CHECK(end.root->exit_code == 3);
    }
  }
  SECTION("an abort from another thread of a waiting node goes around its wait and ends every wait") {
    // Node 0, or an agent, stopped by a signal at the barrier; the bounded abort is the agent's.
    for (const auto& [stopped, bounded] : {std::pair{0, false}, {1, false}, {0, true}, {1, true}}) {
      INFO("node " << stopped << " aborts while it waits, bounded: " << bounded);
      Job job(3);
      std::vector<std::future<ExitBarrierEnd>> fs;
      for (int r : {0, 1}) {
        fs.push_back(std::async(std::launch::async, [&job, r] {
          return job.agents[static_cast<std::size_t>(r)]->exit_barrier();
        }));
      }
      std::this_thread::sleep_for(100ms);  // both wait (an abort before the wait ends it alike)
      core::Failure signal_cause;
      signal_cause.node_rank = stopped;
      signal_cause.exit_code = 143;
      signal_cause.signal = 15;
      signal_cause.reason = "ddprun received SIGTERM";
      auto published = std::async(std::launch::async, [&job, stopped, bounded, &signal_cause] {
        auto& a = *job.agents[static_cast<std::size_t>(stopped)];
        return bounded ? a.abort(signal_cause, 10s) : a.abort(signal_cause);
      });
      CHECK(get_bounded(published).exit_code == 143);
      for (auto& f : fs) {
        const auto end = get_bounded(f);
        REQUIRE(end.root.has_value());
        CHECK(end.from_store);
        CHECK(end.root->exit_code == 143);
      }
    }
  }
  SECTION("a lost master ends an agent's wait with the lost master as its cause") {
    Job job(2);
    auto waiting = std::async(std::launch::async, [&job] { return job.agents[1]->exit_barrier(); });
    CHECK(waiting.wait_for(300ms) == std::future_status::timeout);
    job.agents[0].reset();  // node 0's agent is gone, its store with it
    const auto end = get_bounded(waiting);
    REQUIRE(end.root.has_value());
    CHECK_FALSE(end.from_store);  // this agent's own judgement, no store's root cause
    CHECK(end.root->lost);
    CHECK(end.root->node_rank == 0);
    CHECK(end.root->reason.find("lost the rendezvous store") != std::string::npos);
  }
}

TEST_CASE("rendezvous: restarts use a fresh namespace", "[rendezvous]") {
  Job job(2);
  AbortSink sink;
  for (int r = 0; r < 2; ++r) job.agents[static_cast<std::size_t>(r)]->watch(sink.for_agent(r));
  core::Failure cause;
  cause.exit_code = 7;
  job.agents[1]->abort(cause);
  REQUIRE(sink.wait_for(2));
  for (auto& a : job.agents) a->next_attempt();
  std::vector<std::future<test::Plan>> fs;
  for (int r = 0; r < 2; ++r) {
    fs.push_back(std::async(std::launch::async, [&, r] {
      return join_plan(*job.agents[static_cast<std::size_t>(r)], me(r), simple_plan());
    }));
  }
  for (auto& f : fs) CHECK(get_bounded(f).nnodes == 2);
  CHECK(job.agents[0]->attempt() == 1);
  CHECK_FALSE(job.agents[1]->aborted().has_value());
}

TEST_CASE("rendezvous: garbage and half-open peers during a rendezvous do not disturb it", "[rendezvous]") {
  Rendezvous m(opts_for(0, 3, 3, 0));
  const auto port = m.port();
  auto fm = std::async(std::launch::async, [&] { return join_plan(m, me(0), simple_plan()); });
  std::vector<int> fds;
  for (int i = 0; i < 20; ++i) {
    const int fd = testnet::raw_connect(port);
    REQUIRE(fd >= 0);
    switch (i % 4) {
      case 0:
        testnet::send_all(fd, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        break;
      case 1:
        testnet::send_all(fd, std::string("\xff\xff\xff\xff garbage", 12));
        break;
      case 2:
        testnet::send_all(fd, std::string("\x00\x00\x00\x10", 4));
        break;  // then silence
      default:
        break;  // half-open
    }
    fds.push_back(fd);
  }
  Rendezvous a1(opts_for(1, 3, 3, port));
  Rendezvous a2(opts_for(2, 3, 3, port));
  auto f1 = std::async(std::launch::async, [&] { return join_plan(a1, me(1), simple_plan()); });
  auto f2 = std::async(std::launch::async, [&] { return join_plan(a2, me(2), simple_plan()); });
  CHECK(get_bounded(fm).nnodes == 3);
  CHECK(get_bounded(f1).node_rank == 1);
  CHECK(get_bounded(f2).node_rank == 2);
  for (int fd : fds) ::close(fd);
}

TEST_CASE("rendezvous: bad options are one clear error", "[rendezvous]") {
  CHECK_THROWS_AS(Rendezvous(opts_for(3, 1, 2, 0)), store::Error);
  CHECK_THROWS_AS(Rendezvous(opts_for(0, 3, 2, 0)), store::Error);
}

TEST_CASE("rendezvous: the published plan is test::build_plan's layout (as --dry-run shows)",
          "[rendezvous]") {
  core::JobSpec job;
  job.mode = core::Mode::agent;
  job.master_addr = "127.0.0.1";
  job.master_port = 0;  // let the bind check pick; compared separately below
  job.run_id = "run";
  auto fn = testplan::plan_fn([job](const std::vector<core::NodeSpec>& nodes) mutable {
    job.nnodes = static_cast<int>(nodes.size());
    return test::build_plan(job, nodes);
  });
  Job j(3, fn);
  // The same layout computed directly from the same nodes.
  core::JobSpec direct = job;
  direct.nnodes = 3;
  const auto expected = test::build_plan(direct, testplan::nodes_of({me(0), me(1), me(2)}));
  for (const auto& p : j.plans) {
    REQUIRE(p.workers.size() == expected.workers.size());
    for (std::size_t i = 0; i < p.workers.size(); ++i) {
      CHECK(p.workers[i].rank == expected.workers[i].rank);
      CHECK(p.workers[i].node_rank == expected.workers[i].node_rank);
      CHECK(p.workers[i].local_rank == expected.workers[i].local_rank);
      CHECK(p.workers[i].env == expected.workers[i].env);
    }
  }
}

TEST_CASE("rendezvous: a single node needs nobody else", "[rendezvous]") {
  Rendezvous solo(opts_for(0, 1, 1, 0));
  const auto plan = join_plan(solo, me(0, 4), simple_plan());
  CHECK(plan.nnodes == 1);
  CHECK(plan.world_size == 4);
  CHECK(solo.barrier("exit", 5s));
}

TEST_CASE("rendezvous: while waiting, progress names the nodes still missing", "[rendezvous]") {
  auto mo = opts_for(0, 3, 3, 0);
  mo.join_timeout = 2s;
  mo.progress_interval = 100ms;
  mo.expected_hosts = {"node-a", "node-b", "node-c"};
  std::mutex mu;
  std::vector<std::string> master_msgs, agent_msgs;
  mo.on_progress = [&](const std::string& m) {
    std::lock_guard lk(mu);
    master_msgs.push_back(m);
  };
  Rendezvous m(mo);
  auto ao = opts_for(1, 3, 3, m.port());
  ao.join_timeout = 10s;
  ao.progress_interval = 100ms;
  ao.on_progress = [&](const std::string& msg) {
    std::lock_guard lk(mu);
    agent_msgs.push_back(msg);
  };
  Rendezvous a(ao);
  auto fa = std::async(std::launch::async, [&] {
    try {
      join_plan(a, me(1), simple_plan());
    } catch (const store::Error&) {
    }
  });
  CHECK_THROWS_AS(join_plan(m, me(0), simple_plan()), store::Error);
  get_bounded(fa);
  std::lock_guard lk(mu);
  REQUIRE_FALSE(master_msgs.empty());
  CHECK_THAT(master_msgs.back(), Catch::Contains("missing: node-c (node rank 2)") &&
                                     Catch::Contains(m.endpoint()) && !Catch::Contains("node-b"));
  REQUIRE_FALSE(agent_msgs.empty());
  CHECK_THAT(agent_msgs.front(), Catch::Contains("for node 0 to publish the plan"));
}

TEST_CASE("rendezvous: the master gathers every agent's end-of-run record, in plan order", "[rendezvous]") {
  Job job(3);
  CHECK(job.agents[1]->gather_results(100ms).empty());  // only node 0 gathers
  for (int r : {2, 0, 1})
    CHECK(job.agents[static_cast<std::size_t>(r)]->publish_result(fmt::format("rec {}", r)));
  const auto t0 = std::chrono::steady_clock::now();
  const auto got = job.agents[0]->gather_results(20s);
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  REQUIRE(got.size() == 3);
  for (int r = 0; r < 3; ++r) {
    const auto& g = got[static_cast<std::size_t>(r)];
    CHECK(g.node_rank == r);
    CHECK(g.hostname == fmt::format("host-{}", r));
    CHECK(g.record == fmt::format("rec {}", r));
  }
}

TEST_CASE("rendezvous: a record that never came is one missing report and the others still count",
          "[rendezvous]") {
  Job job(3);
  for (int r : {0, 2})
    CHECK(job.agents[static_cast<std::size_t>(r)]->publish_result(fmt::format("rec {}", r)));
  const auto got = job.agents[0]->gather_results(300ms);
  REQUIRE(got.size() == 3);
  CHECK(got[0].record == "rec 0");
  CHECK_FALSE(got[1].record);
  CHECK(got[2].record == "rec 2");
}

TEST_CASE("rendezvous: gathering is bounded, and stops once nobody who could still report is left",
          "[rendezvous]") {
  Job job(3);
  CHECK(job.agents[0]->publish_result("rec 0"));
  CHECK(job.agents[1]->publish_result("rec 1"));
  // Agent 2 is still connected but never reports: the timeout bounds the wait.
  auto t0 = std::chrono::steady_clock::now();
  auto got = job.agents[0]->gather_results(600ms);
  CHECK(std::chrono::steady_clock::now() - t0 >= 500ms);
  REQUIRE(got.size() == 3);
  CHECK(got[1].record == "rec 1");
  CHECK_FALSE(got[2].record.has_value());
  // Agent 2 is known to be lost (the root cause says so): nobody waits for it.
  t0 = std::chrono::steady_clock::now();
  got = job.agents[0]->gather_results(20s, 2);
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  CHECK(got[1].record == "rec 1");
  // Every other agent is gone (one reported, one died): no point waiting for the rest.
  job.agents[2].reset();
  job.agents[1].reset();
  t0 = std::chrono::steady_clock::now();
  got = job.agents[0]->gather_results(20s);
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  CHECK(got[1].record == "rec 1");
  CHECK_FALSE(got[2].record.has_value());
}

TEST_CASE("rendezvous: an agent whose master is gone cannot publish its record, and says so quickly",
          "[rendezvous]") {
  Job job(2);
  job.agents[0].reset();
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_FALSE(job.agents[1]->publish_result("rec 1"));
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
}

TEST_CASE("rendezvous: liveness timing keeps the master's heartbeat load bounded as nodes grow",
          "[rendezvous]") {
  struct Row {
    int nnodes;
    long interval, agent, node0;
  };
  // Defaults (1 s, 5 s), then a job large enough that the rate bound takes over.
  const Row rows[] = {{1, 1000, 5000, 10000},        {64, 1000, 5000, 10000},   {4000, 1000, 5000, 10000},
                      {4001, 1001, 5000, 10000},     {8192, 2048, 6144, 12288}, {16384, 4096, 12288, 24576},
                      {131072, 32768, 98304, 196608}};
  for (const auto& r : rows) {
    INFO(r.nnodes);
    const auto t = liveness_timing(1000ms, 5000ms, r.nnodes);
    CHECK(t.interval.count() == r.interval);
    CHECK(t.agent_timeout.count() == r.agent);
    CHECK(t.node0_timeout.count() == r.node0);
    // At most kMaxHeartbeatRate heartbeats a second reach node 0, and three fit in a timeout.
    CHECK(r.nnodes * 1000.0 / static_cast<double>(t.interval.count()) <= kMaxHeartbeatRate);
    CHECK(t.agent_timeout >= 3 * t.interval);
  }
  // Short test settings stay as given.
  const auto t = liveness_timing(100ms, 1500ms, 4);
  CHECK(t.interval == 100ms);
  CHECK(t.agent_timeout == 1500ms);
  CHECK(t.node0_timeout == 3000ms);
}

TEST_CASE("the published plan record folds node ranks and host names", "[plan_record]") {
  PlanRecord r;
  r.plan = "opaque \"bytes\"\n";
  for (int i = 0; i < 16384; ++i) {
    r.node_ranks.push_back(i);
    r.hosts.push_back(fmt::format("gpu-node-{:05}", i + 1));
  }
  r.active = 16384;
  const std::string bytes = encode_plan_record(r);
  CHECK(bytes.size() < 200);
  CHECK(decode_plan_record(bytes) == r);

  // Gaps (a node that did not come back), standbys, names no hostlist holds.
  r.node_ranks = {0, 1, 3, 4, 7};
  r.hosts = {"n1", "n2", "n4", "n5", "spare1"};
  r.active = 4;
  CHECK(nlohmann::json::parse(encode_plan_record(r)).at("ranks") ==
        nlohmann::json::parse("[[0,1],[3,4],[7,7]]"));
  CHECK(decode_plan_record(encode_plan_record(r)) == r);
  r.hosts[2] = "odd,name";
  CHECK(nlohmann::json::parse(encode_plan_record(r)).contains("hosts"));
  CHECK(decode_plan_record(encode_plan_record(r)) == r);

  // --rank-order topology's order: node ranks as they come, not sorted.
  r.node_ranks = {0, 2, 1, 3, 4};
  r.hosts = {"n1", "n3", "n2", "n4", "n5"};
  CHECK(nlohmann::json::parse(encode_plan_record(r)).at("ranks") ==
        nlohmann::json::parse("[[0,0],[2,2],[1,1],[3,4]]"));
  CHECK(decode_plan_record(encode_plan_record(r)) == r);
}

namespace {
JoinInfo joiner(int rank, const std::string& topology) {
  JoinInfo j;
  j.node_rank = rank;
  j.hostname = fmt::format("n{}", rank);
  j.topology = topology;
  return j;
}
// "rank" (with "s" on a standby) in the arranged order.
std::string arranged(const std::vector<JoinInfo>& v) {
  std::string out;
  for (const auto& j : v) out += fmt::format("{}{}{} ", j.node_rank, j.standby ? "s" : "", "");
  return out;
}
}  // namespace

TEST_CASE("the master's round orders the nodes by topology and promotes a lost node's neighbour",
          "[rank_order]") {
  const std::vector<JoinInfo> five = {joiner(0, "s0.s1.n0"), joiner(1, "s0.s2.n1"), joiner(2, "s0.s1.n2"),
                                      joiner(3, "s0.s2.n3"), joiner(4, "s0.s1.n4")};
  const std::map<int, std::string> addrs = {
      {0, "s0.s1.n0"}, {1, "s0.s2.n1"}, {2, "s0.s1.n2"}, {3, "s0.s2.n3"}, {4, "s0.s1.n4"}};
  SECTION("slurm: node-rank order, the ranks beyond MAX standbys") {
    CHECK(arranged(arrange_round(five, 3, core::RankOrder::slurm, 0, {}, {})) == "0 1 2 3s 4s ");
  }
  SECTION("topology, first round: the same standbys, the active nodes by switch") {
    CHECK(arranged(arrange_round(five, 3, core::RankOrder::topology, 0, {}, {})) == "0 2 1 3s 4s ");
  }
  SECTION("topology, node 2 (s1) lost: node 4 (s1) replaces it, not node 3") {
    const std::vector<core::Member> before = {
        {0, "n0", false}, {2, "n2", false}, {1, "n1", false}, {3, "n3", true}, {4, "n4", true}};
    const std::vector<JoinInfo> back = {five[0], five[1], five[3], five[4]};
    CHECK(arranged(arrange_round(back, 3, core::RankOrder::topology, 0, before, addrs)) == "0 4 1 3s ");
    // Slurm's order promotes the first standby.
    CHECK(arranged(arrange_round(back, 3, core::RankOrder::slurm, 0, before, addrs)) == "0 1 3 4s ");
  }
  SECTION("topology, after a failover the store node comes first") {
    const std::vector<core::Member> before = {
        {0, "n0", false}, {2, "n2", false}, {1, "n1", false}, {3, "n3", true}, {4, "n4", true}};
    const std::vector<JoinInfo> back = {five[1], five[2], five[3], five[4]};
    CHECK(arranged(arrange_round(back, 3, core::RankOrder::topology, 2, before, {})) == "2 1 3 4s ");
  }
  SECTION("slurm, after a failover the store node comes first, also before an old node 0 that came back") {
    const std::vector<core::Member> before = {{1, "n1", false}, {2, "n2", false}, {3, "n3", false}};
    const std::vector<JoinInfo> back = {five[0], five[1], five[2], five[3]};
    CHECK(arranged(arrange_round(back, 3, core::RankOrder::slurm, 1, before, {})) == "1 0 2 3s ");
  }
}

TEST_CASE("a malformed plan record is one protocol error", "[plan_record]") {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"{", "parse error"},
      {R"({"plan":"p","ranks":[[0,1]],"hostlist":"n[1-2]"})", "active"},
      {R"({"plan":"p","ranks":[[1,0]],"hostlist":"n1","active":1})", "out of order"},
      {R"({"plan":"p","ranks":[[0,1],[1,2]],"hostlist":"n[1-3]","active":1})", "node rank 1 listed twice"},
      {R"({"plan":"p","ranks":[[2,2],[0,2]],"hostlist":"n[1-4]","active":1})", "node rank 2 listed twice"},
      {R"({"plan":"p","ranks":[[-3,-2]],"hostlist":"n[1-2]","active":1})", "out of order"},
      {R"({"plan":"p","ranks":[[0,2000000000]],"hostlist":"n1","active":1})", "too long"},
      {R"({"plan":"p","ranks":[[0,1]],"hostlist":"n[1-3]","active":1})", "3 hosts for 2 node ranks"},
      {R"({"plan":"p","ranks":[[0,1]],"hostlist":"n[3-1]","active":1})", "n[3-1]"},
      {R"({"plan":"p","ranks":[[0,1]],"hostlist":"n[1-2]","active":3})", "3 active of 2"},
      {R"({"plan":"p","ranks":[[0,1e300]],"hostlist":"n[1-2]","active":1})", "expected an integer"},
      {R"({"plan":"p","ranks":[[0,1]],"hostlist":"n[1-2]","active":-1})", "expected an integer"},
      {R"({"plan":"p","ranks":[[0,1]],"hostlist":"n[1-2]","active":1.5})", "expected an integer"},
  };
  for (const auto& [bytes, culprit] : bad) {
    INFO(bytes);
    try {
      decode_plan_record(bytes);
      FAIL("decoded");
    } catch (const store::Error& e) {
      CHECK(e.kind() == store::Error::Kind::protocol);
      CHECK_THAT(e.what(), Catch::Contains("the published plan is malformed") && Catch::Contains(culprit));
    }
  }
}
