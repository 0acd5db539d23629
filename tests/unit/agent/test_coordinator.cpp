// The supervisor and the rest of the job: publishing failures, remote aborts, exit barrier, reruns.
#include <atomic>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <csignal>
#include <mutex>
#include <optional>

#include "agent/signals.hpp"
#include "agent_test_util.hpp"

using namespace agent_test;
using namespace ddprun::agent;

namespace {
class RecordingCoordinator : public Coordinator {
 public:
  void publish_failure(const Failure& f) override {
    std::lock_guard lk(m);
    published.push_back(f);
  }
  void set_remote_abort_handler(std::function<void(const Failure&)> h) override {
    std::lock_guard lk(m);
    handler = std::move(h);
    ++handler_sets;
  }
  std::optional<Failure> exit_barrier() override {
    ++barriers;
    return std::nullopt;
  }
  // Like the store's watch thread; under the lock, as the Coordinator interface requires.
  void abort(const Failure& f) {
    std::lock_guard lk(m);
    if (handler) handler(f);
  }
  std::mutex m;
  std::vector<Failure> published;
  std::function<void(const Failure&)> handler;
  int handler_sets = 0;
  std::atomic<int> barriers{0};
};

AgentOptions quiet_options() {
  auto o = fake_options();
  o.quiet = true;
  return o;
}
}  // namespace

TEST_CASE("a local failure is published once - no exit barrier") {
  RecordingCoordinator c;
  const auto r = run_workers(make_workers({"exit 2", "hang"}), 2, quiet_options(), c);
  CHECK(r.exit_code == 2);
  CHECK_FALSE(r.remote_abort);
  REQUIRE(c.published.size() == 1);
  CHECK(c.published[0].rank == 0);
  CHECK(c.published[0].exit_code == 2);
  CHECK(c.barriers == 0);
  CHECK_FALSE(c.handler);  // cleared at the end of the run
  CHECK(after_attempt(r, std::nullopt, 0, 1).restart);
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
      quiet_options(), c);
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
    auto opts = quiet_options();
    opts.attempt = attempt;
    const auto r = run_workers(make_workers({"exit 0", "exit 0"}), 2, opts, c);
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
  const auto r = run_workers(make_workers({""}), 1, opts, c);
  CHECK(r.spawn_failed);
  CHECK(r.exit_code == 127);
  CHECK_FALSE(after_attempt(r, std::nullopt, 0, 1).restart);
  REQUIRE(c.published.size() == 1);
  CHECK(c.published[0].fatal);  // so the other nodes do not restart either
  REQUIRE(c.published.size() == 1);
  CHECK(c.published[0].reason.find("no such file") != std::string::npos);
}

namespace {
Failure other_node_failed() {
  Failure f;
  f.host = "othernode";
  f.node_rank = 1;
  f.rank = 3;
  f.exit_code = 9;
  f.time = ddprun::core::failure_now();
  return f;
}
}  // namespace

TEST_CASE("another node failing while this one waits at the exit barrier fails this node too") {
  // The barrier names the root cause; the watch's push of it may come before, or only after the run.
  for (const bool pushed : {true, false}) {
    class FailingBarrier : public RecordingCoordinator {
     public:
      explicit FailingBarrier(bool push) : push_(push) {}
      std::optional<Failure> exit_barrier() override {
        ++barriers;
        if (push_) abort(other_node_failed());  // what the store's watch thread does
        return other_node_failed();
      }
      bool push_;
    } c(pushed);
    INFO("pushed before the barrier returned: " << pushed);
    const auto r = run_workers(make_workers({"exit 0"}), 2, quiet_options(), c);
    CHECK(c.barriers == 1);
    CHECK_FALSE(r.success);
    CHECK(r.exit_code == 9);
    CHECK(r.remote_abort);
    REQUIRE(r.root_cause);
    CHECK(r.root_cause->rank == 3);
    CHECK(after_attempt(r, r.root_cause, 0, 1).restart);  // this node comes back for the restart
  }
}

TEST_CASE("a stopping signal at the exit barrier is published at once and stops this node") {
  // The barrier waits until someone publishes (the other nodes run on); the agent's TERM must end it.
  class WaitingBarrier : public RecordingCoordinator {
   public:
    void publish_failure(const Failure& f) override {
      RecordingCoordinator::publish_failure(f);
      std::lock_guard lk(wait_m);
      root = f;
      cv.notify_all();
    }
    std::optional<Failure> exit_barrier() override {
      ++barriers;
      ::kill(::getpid(), SIGTERM);  // scancel while this node waits for the others
      std::unique_lock lk(wait_m);
      cv.wait_for(lk, std::chrono::seconds(60), [&] { return root.has_value(); });
      return root;
    }
    std::mutex wait_m;
    std::condition_variable cv;
    std::optional<Failure> root;
  } c;
  ddprun::agent::hold_stop_signals();  // as the attempts loop does around every run
  const auto r = run_workers(make_workers({"exit 0"}), 2, quiet_options(), c);
  CHECK(ddprun::agent::release_stop_signals() == 0);  // the run took the signal, not the hold
  CHECK(c.barriers == 1);
  REQUIRE(c.published.size() == 1);
  CHECK(c.published[0].rank == -1);  // the agent itself was stopped
  CHECK(c.published[0].signal == SIGTERM);
  CHECK_FALSE(r.success);
  CHECK(r.stopped_by_signal);
  CHECK(r.exit_code == 143);
  CHECK_FALSE(after_attempt(r, c.published[0], 0, 3).restart);
}
