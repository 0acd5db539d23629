// The supervisor and the rest of the job: publishing failures, remote aborts, exit barrier, reruns.
#include <atomic>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <csignal>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>

#include "agent/signals.hpp"
#include "agent_test_util.hpp"

using namespace agent_test;
using namespace ddprun::agent;

namespace {
class RecordingCoordinator : public Coordinator {
 public:
  // As the store: the first failure published wins (`winner` when set: another node's came first).
  PublishOutcome publish_failure(const Failure& f, std::chrono::milliseconds bound) override {
    std::lock_guard lk(m);
    published.push_back(f);
    bounds.push_back(bound);
    return {winner.value_or(published.front()), {}};
  }
  void set_remote_abort_handler(AbortHandler h) override {
    std::lock_guard lk(m);
    handler = std::move(h);
    ++handler_sets;
  }
  BarrierOutcome exit_barrier() override {
    ++barriers;
    return {};
  }
  // Like the store's watch thread; under the lock, as the Coordinator interface requires.
  void abort(const Failure& f, bool from_store = true) {
    std::lock_guard lk(m);
    if (handler) handler(f, from_store);
  }
  std::mutex m;
  std::vector<Failure> published;
  std::vector<std::chrono::milliseconds> bounds;
  std::optional<Failure> winner;
  AbortHandler handler;
  int handler_sets = 0;
  std::atomic<int> barriers{0};
};
}  // namespace

TEST_CASE("a local failure is published once - no exit barrier") {
  RecordingCoordinator c;
  const auto r = run_workers(make_workers({"exit 2", "hang"}), 2, quiet_options(), {}, c, nullptr);
  CHECK(r.exit_code == 2);
  CHECK_FALSE(r.remote_abort);
  REQUIRE(c.published.size() == 1);
  CHECK(c.published[0].rank == 0);
  CHECK(c.published[0].exit_code == 2);
  CHECK(c.barriers == 0);
  CHECK_FALSE(c.handler);  // cleared at the end of the run
  CHECK(after_attempt(r, 0, 1).restart);
}

TEST_CASE("a remote abort tears down this node and its code becomes ours") {
  TempDir dir;
  RecordingCoordinator c;
  std::thread other([&] {
    if (!wait_for_file(dir / "ready0") || !wait_for_file(dir / "ready1")) return;
    Failure f;
    f.host = "othernode";
    f.node_rank = 1;
    f.rank = 5;
    f.exit_code = 42;
    f.reason = "exited with code 42";
    f.time = ddprun::core::failure_now();
    c.abort(f);
  });
  const auto r = run_workers(
      make_workers({"touch " + (dir / "ready0") + " hang", "touch " + (dir / "ready1") + " hang"}), 4,
      quiet_options(), {}, c, nullptr);
  other.join();
  CHECK(r.exit_code == 42);
  CHECK_FALSE(r.success);
  CHECK(r.remote_abort);
  REQUIRE(r.root_cause);
  CHECK(r.root_cause->host == "othernode");
  CHECK(c.published.empty());
  CHECK(c.barriers == 0);
  for (const auto& e : r.exits) {
    CHECK(e.status.signal == SIGTERM);
    CHECK(e.stopped_by_ddprun);
  }
}

TEST_CASE("success passes the exit barrier and runs can repeat with signal handling restored") {
  struct sigaction before {};
  ::sigaction(SIGTERM, nullptr, &before);
  struct sigaction pipe_before {};
  ::sigaction(SIGPIPE, nullptr, &pipe_before);
  RecordingCoordinator c;
  for (int attempt = 0; attempt < 3; ++attempt) {
    AttemptContext ctx;
    ctx.attempt = attempt;
    const auto r = run_workers(make_workers({"exit 0", "exit 0"}), 2, quiet_options(), ctx, c, nullptr);
    CHECK(r.success);
    CHECK(r.exit_code == 0);
    CHECK(r.attempt == attempt);
    CHECK(r.exits.size() == 2);
  }
  CHECK(c.barriers == 3);
  CHECK(c.handler_sets == 6);  // installed and cleared once per run
  struct sigaction after {};
  ::sigaction(SIGTERM, nullptr, &after);
  CHECK(after.sa_handler == before.sa_handler);
  ::sigaction(SIGPIPE, nullptr, &after);
  CHECK(after.sa_handler == pipe_before.sa_handler);
}

TEST_CASE("a command that cannot start is published as fatal and not restarted") {
  RecordingCoordinator c;
  auto opts = quiet_options();
  opts.command = {"/nonexistent/prog"};
  const auto r = run_workers(make_workers({""}), 1, opts, {}, c, nullptr);
  CHECK(r.spawn_failed);
  CHECK(r.exit_code == 127);
  CHECK_FALSE(after_attempt(r, 0, 1).restart);
  REQUIRE(c.published.size() == 1);
  CHECK(c.published[0].fatal);  // so the other nodes do not restart either
  CHECK(c.published[0].reason.find("no such file") != std::string::npos);
}

namespace {
Failure other_node_failure(int code) {
  Failure f;
  f.host = "othernode";
  f.node_rank = 1;
  f.rank = 3;
  f.pid = 4242;
  f.exit_code = code;
  f.reason = "exited with code " + std::to_string(code);
  f.time = ddprun::core::failure_now();
  return f;
}

// What the store's watch hands over when node 0 is gone: this node's own judgement, no store's cause.
Failure lost_node0() {
  Failure lost;
  lost.host = "node0";
  lost.node_rank = 0;
  lost.exit_code = 1;
  lost.lost = true;
  lost.reason = "lost the rendezvous store at node0:1: the connection is gone";
  lost.time = ddprun::core::failure_now();
  return lost;
}
}  // namespace

TEST_CASE("another node failing while this one waits at the exit barrier fails this node too") {
  // The barrier names the root cause; the watch's push of it may come before, or only after the run.
  for (const bool pushed : {true, false}) {
    class FailingBarrier : public RecordingCoordinator {
     public:
      explicit FailingBarrier(bool push) : push_(push) {}
      BarrierOutcome exit_barrier() override {
        ++barriers;
        if (push_) abort(other_node_failure(9));  // what the store's watch thread does
        return {other_node_failure(9), true};
      }
      bool push_;
    } c(pushed);
    INFO("pushed before the barrier returned: " << pushed);
    const auto r = run_workers(make_workers({"exit 0"}), 2, quiet_options(), {}, c, nullptr);
    CHECK(c.barriers == 1);
    CHECK_FALSE(r.success);
    CHECK(r.exit_code == 9);
    CHECK(r.remote_abort);
    REQUIRE(r.root_cause);
    CHECK(r.root_cause->rank == 3);
    CHECK(after_attempt(r, 0, 1).restart);  // this node comes back for the restart
  }
}

namespace {
// A barrier that waits until this node publishes (the other nodes run on), after sending the agent a
// TERM as scancel would while it waits: the signal thread must end the wait.
class WaitingBarrier : public RecordingCoordinator {
 public:
  PublishOutcome publish_failure(const Failure& f, std::chrono::milliseconds bound) override {
    RecordingCoordinator::publish_failure(f, bound);
    const PublishOutcome o = answer(f);
    std::lock_guard lk(wait_m);
    ended = true;
    cv.notify_all();
    return o;
  }
  BarrierOutcome exit_barrier() override {
    ++barriers;
    ::kill(::getpid(), SIGTERM);  // scancel while this node waits for the others
    std::unique_lock lk(wait_m);
    cv.wait_for(lk, std::chrono::seconds(60), [&] { return ended; });
    return end();
  }
  // What the store answered the publication, and how the barrier then ended.
  virtual PublishOutcome answer(const Failure& f) { return {f, {}}; }
  virtual BarrierOutcome end() { return {published.front(), true}; }
  std::mutex wait_m;
  std::condition_variable cv;
  bool ended = false;
};
}  // namespace

TEST_CASE("a stopping signal at the exit barrier is published at once, bounded, and stops this node") {
  WaitingBarrier c;
  auto opts = quiet_options();
  opts.term_timeout = std::chrono::milliseconds(700);
  ddprun::agent::hold_stop_signals();  // as the attempts loop does around every run
  const auto r = run_workers(make_workers({"exit 0"}), 2, opts, {}, c, nullptr);
  CHECK(ddprun::agent::release_stop_signals() == 0);  // the run took the signal, not the hold
  CHECK(c.barriers == 1);
  REQUIRE(c.published.size() == 1);
  CHECK(c.published[0].rank == -1);  // the agent itself was stopped
  CHECK(c.published[0].signal == SIGTERM);
  REQUIRE(c.bounds.size() == 1);
  CHECK(c.bounds[0] == std::chrono::milliseconds(1700));  // as every publication: --term-timeout + 1 s
  CHECK_FALSE(r.success);
  CHECK(r.stopped_by_signal);
  REQUIRE(r.root_cause);
  CHECK(r.root_cause->signal == SIGTERM);
  CHECK_FALSE(r.remote_abort);
  CHECK(r.not_told.empty());
  CHECK(r.exit_code == 143);
  CHECK_FALSE(after_attempt(r, 0, 3).restart);
}

TEST_CASE("a stop at the exit barrier that the others cannot be told of stays this node's root cause") {
  // The store does not answer; the failed publication ends this node's wait with its node 0 lost.
  class Unreachable : public WaitingBarrier {
   public:
    PublishOutcome answer(const Failure&) override {
      return {std::nullopt, "the rendezvous store at node0:1 did not answer within 1700 ms"};
    }
    BarrierOutcome end() override {
      const Failure lost = lost_node0();
      abort(lost, false);  // what the watch hands over too
      return {lost, false};
    }
  } c;
  ddprun::agent::hold_stop_signals();
  const auto r = run_workers(make_workers({"exit 0"}), 2, quiet_options(), {}, c, nullptr);
  CHECK(ddprun::agent::release_stop_signals() == 0);
  REQUIRE(c.published.size() == 1);
  REQUIRE(r.root_cause);
  CHECK(r.root_cause->rank == -1);  // the signal, not node 0 it could not reach
  CHECK(r.root_cause->signal == SIGTERM);
  CHECK_FALSE(r.root_cause->lost);
  CHECK(r.exit_code == 143);
  CHECK(r.stopped_by_signal);
  CHECK_FALSE(r.remote_abort);
  CHECK_THAT(r.not_told, Catch::Contains("did not answer within 1700 ms"));
  CHECK_FALSE(after_attempt(r, 0, 3).restart);
}

TEST_CASE("the store's answer names the root cause: another node's failure published first wins here too") {
  RecordingCoordinator c;
  c.winner = other_node_failure(9);  // its compare-and-set came first
  const auto r = run_workers(make_workers({"exit 2", "hang"}), 4, quiet_options(), {}, c, nullptr);
  REQUIRE(c.published.size() == 1);
  CHECK(c.published[0].exit_code == 2);  // this node told the others of its own
  REQUIRE(r.root_cause);
  CHECK(r.root_cause->rank == 3);  // and names the one the store holds, everywhere
  CHECK(r.root_cause->host == "othernode");
  CHECK(r.exit_code == 9);
  CHECK(r.remote_abort);
  CHECK(r.not_told.empty());
  CHECK(after_attempt(r, 0, 0).exit_code == 9);
  CHECK(report_to_json(r).at("root_cause").at("rank") == 3);
}

TEST_CASE("a lost master never replaces this node's own failure as the root cause") {
  // Node 0 is called lost while this node's failure is being published, which then fails.
  class LostMaster : public RecordingCoordinator {
   public:
    PublishOutcome publish_failure(const Failure& f, std::chrono::milliseconds bound) override {
      RecordingCoordinator::publish_failure(f, bound);
      const Failure lost = lost_node0();
      abort(lost, false);  // what the watch hands over: no store's cause
      return {std::nullopt, "the connection is gone"};
    }
  } c;
  const auto r = run_workers(make_workers({"exit 2", "hang"}), 4, quiet_options(), {}, c, nullptr);
  REQUIRE(r.root_cause);
  CHECK(r.root_cause->rank == 0);
  CHECK(r.exit_code == 2);
  CHECK_FALSE(r.remote_abort);
  CHECK(r.not_told == "the connection is gone");
}

TEST_CASE("a store that does not answer holds up neither the teardown nor the root cause") {
  TempDir dir;
  // Its publication returns only once the other worker got the teardown's TERM (or after a long
  // while): a supervisor that waited for it before tearing down would never see that happen.
  class SilentStore : public RecordingCoordinator {
   public:
    explicit SilentStore(std::string f) : term_file(std::move(f)) {}
    PublishOutcome publish_failure(const Failure& f, std::chrono::milliseconds bound) override {
      RecordingCoordinator::publish_failure(f, bound);
      for (int i = 0; i < 2000 && !std::ifstream(term_file).good(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      torn_down_first = std::ifstream(term_file).good();
      return {std::nullopt, "the rendezvous store at node0:1 did not answer within 1500 ms"};
    }
    std::string term_file;
    std::atomic<bool> torn_down_first{false};
  } c(dir / "term");
  auto opts = quiet_options();
  opts.term_timeout = std::chrono::milliseconds(500);
  const auto r =
      run_workers(make_workers({"wait-file " + (dir / "ready") + " exit 2",
                                "trap-term " + (dir / "term") + " touch " + (dir / "ready") + " hang"}),
                  4, opts, {}, c, nullptr);
  CHECK(c.torn_down_first);
  REQUIRE(c.bounds.size() == 1);
  CHECK(c.bounds[0] == std::chrono::milliseconds(1500));  // --term-timeout + 1 s
  REQUIRE(r.root_cause);
  CHECK(r.root_cause->rank == 0);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.not_told, Catch::Contains("did not answer within 1500 ms"));
  CHECK_THAT(format_report(r), Catch::Contains("the other nodes could not be told of this failure"));
  CHECK(report_to_json(r).at("others_told") == false);
}
