// --cpu-bind with real workers: the affinity each worker sees (Python's os.sched_getaffinity) and its
// OMP_NUM_THREADS, under the test's own affinity and under a narrower one it hands down.
#include <catch2/catch.hpp>

#include <sched.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "e2e/job.hpp"
#include "support/paths.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

const std::string kReport =
    "import os; print('rank', os.environ['RANK'], 'cpus', ','.join(map(str, "
    "sorted(os.sched_getaffinity(0)))), "
    "'omp', os.environ.get('OMP_NUM_THREADS', '-'), flush=True)";

struct Seen {
  std::set<int> cpus;
  std::string omp;
};

// rank -> what it reported.
std::map<int, Seen> reports(const std::string& out) {
  std::map<int, Seen> seen;
  static const std::regex line(R"(rank (\d+) cpus ([0-9,]+) omp (\S+))");
  for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it) {
    Seen s;
    std::stringstream cpus((*it)[2].str());
    for (std::string c; std::getline(cpus, c, ',');) s.cpus.insert(std::stoi(c));
    s.omp = (*it)[3].str();
    seen[std::stoi((*it)[1].str())] = s;
  }
  return seen;
}

std::set<int> own_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  ::sched_getaffinity(0, sizeof set, &set);
  std::set<int> out;
  for (int i = 0; i < CPU_SETSIZE; ++i) {
    if (CPU_ISSET(static_cast<std::size_t>(i), &set)) out.insert(i);
  }
  return out;
}

// Runs a standalone ddprun with 2 reporting workers, optionally under a narrower affinity that it
// inherits (as from a Slurm cgroup or taskset).
Proc run_two(TempDir& dir, const std::string& mode, const std::set<int>& inherit = {}) {
  cpu_set_t saved;
  ::sched_getaffinity(0, sizeof saved, &saved);
  if (!inherit.empty()) {
    cpu_set_t narrow;
    CPU_ZERO(&narrow);
    for (int c : inherit) CPU_SET(static_cast<std::size_t>(c), &narrow);
    REQUIRE(::sched_setaffinity(0, sizeof narrow, &narrow) == 0);
  }
  Proc p = start({ddprun_test::ddprun_exe(), "--standalone", "--nproc-per-node", "2", "--cpu-bind", mode,
                  "--no-python", "--", "/usr/bin/python3", "-c", kReport},
                 {{"DIR", dir.path()}}, dir.path(), "ddprun-" + mode);
  ::sched_setaffinity(0, sizeof saved, &saved);
  REQUIRE(wait_for(p, 120s));
  return p;
}

}  // namespace

TEST_CASE("cpu-bind cores: two real workers each see a disjoint share and OMP_NUM_THREADS of it",
          "[e2e][cpubind]") {
  const std::set<int> mine = own_cpus();
  if (mine.size() < 2) {
    WARN("needs 2 CPUs in the test's affinity; skipped");
    return;
  }
  TempDir dir;
  Proc p = run_two(dir, "cores");
  INFO(p.out() << p.err());
  REQUIRE(p.code == 0);
  auto seen = reports(p.out());
  REQUIRE(seen.size() == 2);
  for (const auto& [rank, s] : seen) {
    CHECK_FALSE(s.cpus.empty());
    for (int c : s.cpus) CHECK(mine.count(c) == 1);  // never outside what ddprun was given
  }
  for (int c : seen[0].cpus) CHECK(seen[1].cpus.count(c) == 0);
  CHECK(seen[0].cpus.size() == seen[1].cpus.size());
  // One core each on a 2-core machine; more cores give more threads, never the whole machine.
  CHECK(std::stoi(seen[0].omp) >= 1);
  CHECK(std::stoul(seen[0].omp) <= seen[0].cpus.size());
  if (mine.size() == 2) CHECK(seen[0].omp == "1");
}

TEST_CASE("cpu-bind none leaves the workers the agent's whole affinity", "[e2e][cpubind]") {
  TempDir dir;
  Proc p = run_two(dir, "none");
  INFO(p.out() << p.err());
  REQUIRE(p.code == 0);
  auto seen = reports(p.out());
  REQUIRE(seen.size() == 2);
  CHECK(seen[0].cpus == own_cpus());
  CHECK(seen[1].cpus == own_cpus());
}

TEST_CASE("cpu-bind never widens an inherited affinity, too few cores is an error before any start",
          "[e2e][cpubind][error]") {
  const int cpu = *own_cpus().begin();
  TempDir dir;
  Proc numa = run_two(dir, "numa", {cpu});
  INFO(numa.out() << numa.err());
  REQUIRE(numa.code == 0);
  auto seen = reports(numa.out());
  REQUIRE(seen.size() == 2);
  CHECK(seen[0].cpus == std::set<int>{cpu});
  CHECK(seen[1].cpus == std::set<int>{cpu});
  CHECK(seen[0].omp == "1");

  Proc cores = run_two(dir, "cores", {cpu});
  CHECK(cores.code == 2);
  CHECK_THAT(cores.err(),
             Catch::Contains("ddprun: error: --cpu-bind cores: 2 workers but only 1 core available "
                             "to this agent"));
  CHECK(reports(cores.out()).empty());  // no worker ran
}
