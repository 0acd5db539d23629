// ddprun on a Linux 4.18 kernel (RHEL/Rocky/Alma 8): every agent runs under tests/helpers/old_kernel,
// whose seccomp filter answers ENOSYS to each system call added after 4.18 (pidfd_open, close_range,
// clone3, ...), for the agent and everything it starts. The agents must notice their workers' and
// health checks' exits without pidfds, and end a job as they do on a new kernel (docs/install.md,
// "Supported systems").
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>

#include "e2e/job.hpp"
#include "support/paths.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

// A job whose agents run as on Linux 4.18.
struct OldKernelJob : Job {
  OldKernelJob() { wrapper = {ddprun_test::old_kernel()}; }
};

// Exits 0 only where pidfd_open fails with ENOSYS: the worker really runs under the old kernel's rules.
const std::string kCheckOldKernel =
    "python3 -c 'import errno, os, sys\n"
    "try:\n"
    "    os.close(os.pidfd_open(os.getpid()))\n"
    "except OSError as e:\n"
    "    sys.exit(0 if e.errno == errno.ENOSYS else 3)\n"
    "sys.exit(4)'";

}  // namespace

TEST_CASE("old kernel: a 2-node job succeeds, its workers under the same rules", "[e2e][old-kernel]") {
  OldKernelJob job;
  job.start(2, 2, sh(kCheckOldKernel + " && touch \"$DIR/done.$RANK\""));
  job.wait_all();
  for (auto& a : job.agents) {
    INFO(a.err());
    CHECK(a.code == 0);
    CHECK_THAT(a.err(), !Catch::Contains("pidfd"));
  }
  for (int rank = 0; rank < 4; ++rank)
    CHECK(std::filesystem::exists(job.dir / ("done." + std::to_string(rank))));
  CHECK(leftovers_after(job.token, 5s).empty());
}

TEST_CASE("old kernel: a failing rank tears down every node with its exit code", "[e2e][old-kernel]") {
  OldKernelJob job;
  job.start(
      2, 1,
      sh("if [ \"$RANK\" = 1 ]; then exec " + kFake + " sleep 300 exit 7; else exec " + kFake + " hang; fi"));
  job.wait_all();
  for (auto& a : job.agents) {
    INFO(a.err());
    CHECK(a.code == 7);
  }
  CHECK_THAT(job.agents[0].err(), Catch::Contains("exit code : 7"));
  CHECK(leftovers_after(job.token, 5s).empty());
}

TEST_CASE("old kernel: SIGTERM to an agent reaches the workers, nothing is left running",
          "[e2e][old-kernel]") {
  OldKernelJob job;
  job.start(2, 1, sh("exec " + kFake + " trap-term \"$DIR/term_$RANK\" touch \"$DIR/ready_$RANK\" hang"));
  REQUIRE(wait_file(job.dir / "ready_0"));
  REQUIRE(wait_file(job.dir / "ready_1"));
  ::kill(job.agents[1].pid, SIGTERM);
  job.wait_all();
  CHECK(read_file(job.dir / "term_0") == "TERM\n");
  CHECK(read_file(job.dir / "term_1") == "TERM\n");
  for (auto& a : job.agents) {
    INFO(a.err());
    CHECK(a.code == 143);
  }
  CHECK(leftovers_after(job.token, 5s).empty());
}

TEST_CASE("old kernel: a hung rank is caught by --hang-timeout", "[e2e][old-kernel]") {
  OldKernelJob job;
  job.start(1, 1, {kFake, "hang"}, {"--hang-timeout", "1"});
  job.wait_all();
  INFO(job.agents[0].err());
  CHECK(job.agents[0].code == 124);
  CHECK(leftovers_after(job.token, 5s).empty());
}

TEST_CASE("old kernel: a failed health check's exit code and output reach every node", "[e2e][old-kernel]") {
  OldKernelJob job;
  job.extra_of[1] = {"--health-check", "echo 'GPU 3: ECC errors'; exit 7"};
  job.extra_of[0] = {"--health-check", "true"};
  job.start(2, 1, sh("touch \"$DIR/started.$RANK\""));
  job.wait_all();
  for (auto& a : job.agents) {
    INFO(a.err());
    CHECK(a.code == 125);
    CHECK_THAT(a.err(), Catch::Contains("failed its health check") && Catch::Contains("exited with code 7") &&
                            Catch::Contains("GPU 3: ECC errors"));
  }
  CHECK_FALSE(std::filesystem::exists(job.dir / "started.0"));
  CHECK(leftovers_after(job.token, 5s).empty());
}
