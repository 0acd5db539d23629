// Elastic jobs on loopback with shell workers (docs/elastic.md): restarts that a lost node caused (issue 35).
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include "e2e/procs.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

// Agents of one job on loopback, each started alone (node rank, its own options), running `script`.
struct ShellJob {
  TempDir dir;
  std::string token = "ddprun-standby-" + std::to_string(::getpid()) + "-" + std::to_string(free_port());
  int port = free_port();
  std::string script;
  std::map<int, Proc> agents;  // by node rank

  void start(int node_rank, const std::string& nnodes, std::vector<std::string> extra = {},
             std::map<std::string, std::string> env = {}) {
    std::vector<std::string> argv = {DDPRUN_EXE,
                                     "--nnodes",
                                     nnodes,
                                     "--node-rank",
                                     std::to_string(node_rank),
                                     "--rdzv-endpoint",
                                     "127.0.0.1:" + std::to_string(port),
                                     "--nproc-per-node",
                                     "1",
                                     "--term-timeout",
                                     "3",
                                     "--rdzv-timeout",
                                     "120"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    for (const std::string& w : {std::string("--"), std::string("/bin/sh"), std::string("-c"), script})
      argv.push_back(w);
    env["DIR"] = dir.path();
    env["DDPRUN_TEST_TOKEN"] = token;
    agents.emplace(node_rank,
                   ddprun::test::start(argv, env, dir.path(), "agent" + std::to_string(node_rank)));
  }
  // Every file `prefix`0 .. `prefix`n-1 exists (the workers of an attempt started).
  bool files(const std::string& prefix, int n, std::chrono::seconds limit = 120s) {
    for (int r = 0; r < n; ++r) {
      if (!wait_file(dir / (prefix + std::to_string(r)), limit)) {
        for (const auto& [rank, a] : agents) UNSCOPED_INFO("agent " << rank << " so far:\n" << a.err());
        return false;
      }
    }
    return true;
  }
  // Agent `n`'s stderr shows `text` (bounded).
  bool says(int n, const std::string& text, std::chrono::seconds limit = 120s) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (agents.at(n).err().find(text) == std::string::npos) {
      if (std::chrono::steady_clock::now() > end) {
        UNSCOPED_INFO("agent " << n << " so far:\n" << agents.at(n).err());
        return false;
      }
      std::this_thread::sleep_for(20ms);
    }
    return true;
  }
  ~ShellJob() {
    for (auto& [n, a] : agents) wait_for(a, 1ms);
    leftovers_after(token, 1ms);
  }
};

}  // namespace

TEST_CASE("elastic: restarts that lost nodes caused are not restarts without progress", "[e2e][elastic]") {
  // Every attempt reports a higher step; two nodes are lost in a row. With
  // --max-restarts-without-progress 1 the second loss is no stalled restart: the job finishes.
  ShellJob job;
  job.script =
      "n=$TORCHELASTIC_RESTART_COUNT; echo \"step $(( (n + 1) * 100 ))\" > \"$DDPRUN_HEARTBEAT_FILE\"; "
      "touch \"$DIR/ready.$n.$RANK\"; [ \"$n\" -ge 2 ] && exit 0; exec sleep 300";
  for (int n = 0; n < 5; ++n)
    job.start(n, "3:5", {"--max-restarts", "3", "--max-restarts-without-progress", "1"});
  REQUIRE(job.files("ready.0.", 5));
  ::kill(job.agents.at(4).pid, SIGKILL);
  REQUIRE(job.files("ready.1.", 4));
  ::kill(job.agents.at(3).pid, SIGKILL);
  for (int n : {0, 1, 2}) {
    REQUIRE(wait_for(job.agents.at(n), 180s));
    INFO("agent " << n << ": " << job.agents.at(n).err());
    CHECK(job.agents.at(n).code == 0);
    CHECK_THAT(job.agents.at(n).err(), !Catch::Contains("no progress"));
  }
  CHECK(job.files("ready.2.", 3, 1s));
  CHECK(leftovers_after(job.token, 10s).empty());
}
