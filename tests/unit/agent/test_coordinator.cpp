// The supervisor and the rest of the job: publishing failures, remote aborts, exit barrier, reruns.
#include <atomic>
#include <catch2/catch.hpp>
#include <csignal>
#include <mutex>

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
  bool exit_barrier(std::chrono::milliseconds) override {
    ++barriers;
    return true;
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

TEST_CASE("another node failing while this one waits at the exit barrier fails this node too") {
  class FailingBarrier : public RecordingCoordinator {
   public:
    bool exit_barrier(std::chrono::milliseconds) override {
      ++barriers;
      Failure f;
      f.host = "othernode";
      f.node_rank = 1;
      f.rank = 3;
      f.exit_code = 9;
      f.time = ddprun::core::failure_now();
      abort(f);  // what the store's watch thread does
      return false;
    }
  } c;
  const auto r = run_workers(make_workers({"exit 0"}), 2, quiet_options(), c);
  CHECK(c.barriers == 1);
  CHECK_FALSE(r.success);
  CHECK(r.exit_code == 9);
  CHECK(r.remote_abort);
  REQUIRE(r.root_cause);
  CHECK(r.root_cause->rank == 3);
}
