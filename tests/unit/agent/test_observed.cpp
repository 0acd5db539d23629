// Status records and stacks requests only where someone can read them (`ddprun top`, `ddprun stacks`).
#include <atomic>
#include <catch2/catch.hpp>
#include <optional>
#include <string>

#include "agent_test_util.hpp"

using namespace agent_test;
using namespace ddprun::agent;

namespace {
// A job's coordinator that counts the observability calls the run makes.
class CountingCoordinator : public Coordinator {
 public:
  explicit CountingCoordinator(bool observed) : observed_(observed) {}
  PublishOutcome publish_failure(const Failure& f, std::chrono::milliseconds) override { return {f, {}}; }
  void set_remote_abort_handler(AbortHandler) override {}
  BarrierOutcome exit_barrier() override { return {}; }
  bool observed() const override { return observed_; }
  bool publish_status(int, const std::string&) override {
    ++status_records;
    return true;
  }
  std::optional<std::string> stacks_request() override {
    ++stacks_polls;
    return std::nullopt;
  }
  std::atomic<int> status_records{0};
  std::atomic<int> stacks_polls{0};

 private:
  bool observed_;
};
}  // namespace

TEST_CASE("a job nobody can observe publishes no status and polls for no stacks requests") {
  CountingCoordinator c(false);  // standalone or per-task mode: no store to publish at
  const auto r = run_workers(make_workers({"sleep 1500", "sleep 1500"}), 2, quiet_options(), {}, c, nullptr);
  CHECK(r.exit_code == 0);
  CHECK(c.status_records == 0);
  CHECK(c.stacks_polls == 0);
}

TEST_CASE("a job with a store publishes its node's status while the workers run and when they end") {
  CountingCoordinator c(true);
  const auto r = run_workers(make_workers({"sleep 1500", "sleep 1500"}), 2, quiet_options(), {}, c, nullptr);
  CHECK(r.exit_code == 0);
  CHECK(c.status_records >= 1);  // at least the last record, published before the run ends
}
