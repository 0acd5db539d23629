// Per-task mode on loopback: srun's environment faked for N nodes x K tasks, one ddprun per task. Only local
// task 0 of each node talks to the master's store; failures still reach every task with one exit code.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>

#include "e2e/job.hpp"
#include "support/paths.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

struct PerTaskJob {
  TempDir dir;
  std::string token = "ddprun-e2e-pt-" + std::to_string(::getpid()) + "-" + std::to_string(free_port());
  int port = free_port();
  int nnodes = 0;
  int tasks = 0;
  std::vector<Proc> agents;  // index = SLURM_PROCID

  void start(int n, int k, const std::vector<std::string>& command) {
    nnodes = n;
    tasks = k;
    const std::string nodelist = "node[1-" + std::to_string(n) + "]";
    for (int node = 0; node < n; ++node) {
      for (int local = 0; local < k; ++local) {
        const int proc = node * k + local;
        std::vector<std::string> argv = {ddprun_test::ddprun_exe(),
                                         "--rdzv-endpoint",
                                         "127.0.0.1:" + std::to_string(port),
                                         "--master-addr",
                                         "127.0.0.1",
                                         "--rdzv-timeout",
                                         "60",
                                         "--term-timeout",
                                         "3",
                                         "--"};
        argv.insert(argv.end(), command.begin(), command.end());
        const std::map<std::string, std::string> env = {
            {"DDPRUN_TEST_TOKEN", token},
            // Under Slurm the store is never open: one shared secret, as a user exports it before srun.
            {"DDPRUN_TOKEN", "e2e-per-task-" + token},
            {"DIR", dir.path()},
            {"SLURM_JOB_ID", std::to_string(port)},  // the node-local ports follow it: unique per test
            {"SLURM_STEP_ID", "0"},
            {"SLURM_STEP_NODELIST", nodelist},
            {"SLURM_JOB_NODELIST", nodelist},
            {"SLURM_NODELIST", nodelist},
            {"SLURM_STEP_NUM_NODES", std::to_string(n)},
            {"SLURM_JOB_NUM_NODES", std::to_string(n)},
            {"SLURM_NNODES", std::to_string(n)},
            {"SLURM_STEP_NUM_TASKS", std::to_string(n * k)},
            {"SLURM_NTASKS", std::to_string(n * k)},
            {"SLURM_STEP_TASKS_PER_NODE", std::to_string(k) + "(x" + std::to_string(n) + ")"},
            {"SLURM_NODEID", std::to_string(node)},
            {"SLURM_PROCID", std::to_string(proc)},
            {"SLURM_LOCALID", std::to_string(local)}};
        agents.push_back(ddprun::test::start(argv, env, dir.path(), "task" + std::to_string(proc)));
      }
    }
  }
  void wait_all(std::chrono::milliseconds limit = 120s) {
    for (auto& a : agents) CHECK(wait_for(a, limit));
  }
  ~PerTaskJob() {
    for (auto& a : agents) wait_for(a, 1ms);
    leftovers_after(token, 1ms);
  }
};

// Inodes of the established TCP connections (IPv4) whose remote end is 127.0.0.1:port.
std::set<std::string> client_sockets_to(int port) {
  std::set<std::string> out;
  std::ifstream f("/proc/net/tcp");
  std::string line;
  std::getline(f, line);  // header
  char want[16];
  std::snprintf(want, sizeof want, ":%04X", port);
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string sl, local, remote, state, queues, timer, retr, uid, timeout, inode;
    in >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
    if (state == "01" && remote.size() > 5 && remote.substr(remote.size() - 5) == want) out.insert(inode);
  }
  return out;
}

// Which of `pids` hold one of those sockets.
std::set<pid_t> owners(const std::vector<Proc>& procs, const std::set<std::string>& inodes) {
  std::set<pid_t> out;
  for (const auto& p : procs) {
    const std::string fds = "/proc/" + std::to_string(p.pid) + "/fd";
    DIR* d = ::opendir(fds.c_str());
    if (d == nullptr) continue;
    while (dirent* e = ::readdir(d)) {
      char target[128] = {};
      const std::string link = fds + "/" + e->d_name;
      const auto n = ::readlink(link.c_str(), target, sizeof target - 1);
      if (n <= 0) continue;
      const std::string t(target, static_cast<std::size_t>(n));
      if (t.rfind("socket:[", 0) == 0 && inodes.contains(t.substr(8, t.size() - 9))) out.insert(p.pid);
    }
    ::closedir(d);
  }
  return out;
}

}  // namespace

TEST_CASE("per-task mode: only one task per node connects to the master's store", "[e2e][per_task]") {
  PerTaskJob job;
  // Every worker says it runs, then waits for the test to have looked.
  job.start(3, 4,
            sh("touch \"$DIR/ready_$RANK\"; while [ ! -e \"$DIR/go\" ]; do sleep 0.05; done; "
               "echo \"$RANK $LOCAL_RANK $WORLD_SIZE\" > \"$DIR/t_$RANK\""));
  for (int r = 0; r < 12; ++r) REQUIRE(wait_file(job.dir / ("ready_" + std::to_string(r))));
  // Workers run only once every relay joined the master's store; relays stay connected until the end.
  const auto connected = owners(job.agents, client_sockets_to(job.port));
  std::ofstream(job.dir / "go").close();
  job.wait_all();
  std::set<pid_t> relays;
  for (int node = 0; node < 3; ++node) relays.insert(job.agents[static_cast<std::size_t>(node * 4)].pid);
  CHECK(connected == relays);
  for (int r = 0; r < 12; ++r) {
    INFO(job.agents[static_cast<std::size_t>(r)].err());
    CHECK(job.agents[static_cast<std::size_t>(r)].code == 0);
    CHECK(read_file(job.dir / ("t_" + std::to_string(r))) ==
          std::to_string(r) + " " + std::to_string(r % 4) + " 12\n");
  }
  // One job-wide summary, from the master, covering every task.
  CHECK_THAT(job.agents[0].err(), Catch::Contains("success, 12 tasks on 3 nodes exited 0"));
}

TEST_CASE("per-task mode: a failing task's exit code and root cause reach every task", "[e2e][per_task]") {
  PerTaskJob job;
  // Rank 4 is a member on node 1 (not its relay); everyone else would run forever.
  job.start(
      2, 3,
      sh("if [ \"$RANK\" = 4 ]; then exec " + kFake + " sleep 300 exit 7; else exec " + kFake + " hang; fi"));
  job.wait_all();
  for (auto& a : job.agents) {
    INFO(a.err());
    CHECK(a.code == 7);
  }
  CHECK_THAT(job.agents[0].err(), Catch::Contains("exit code : 7") && Catch::Contains(": 4 (local rank 1)"));
  for (std::size_t i = 1; i < job.agents.size(); ++i) {
    CHECK_THAT(job.agents[i].err(), Catch::Contains("root cause rank 4 on node2"));
  }
  CHECK(leftovers_after(job.token, 5s).empty());
}

TEST_CASE("per-task mode: a lost relay leaves none of its node's tasks hanging", "[e2e][per_task]") {
  PerTaskJob job;
  job.start(2, 3, sh("touch \"$DIR/ready_$RANK\"; exec " + kFake + " hang"));
  for (int r = 0; r < 6; ++r) REQUIRE(wait_file(job.dir / ("ready_" + std::to_string(r))));
  ::kill(job.agents[3].pid, SIGKILL);  // node 1's relay
  job.wait_all(60s);
  for (std::size_t i = 0; i < job.agents.size(); ++i) {
    if (i == 3) continue;
    INFO(job.agents[i].err());
    CHECK(job.agents[i].code == 1);
  }
  CHECK(leftovers_after(job.token, 5s).empty());
}

TEST_CASE("per-task mode: the job summary counts tasks and nodes apart", "[e2e][per_task]") {
  PerTaskJob job;
  job.start(2, 2, {kFake, "exit", "0"});
  job.wait_all();
  for (auto& a : job.agents) CHECK(a.code == 0);
  INFO(job.agents[0].err());
  CHECK_THAT(job.agents[0].err(),
             Catch::Contains("ddprun: job summary (attempt 0): success, 4 tasks on 2 nodes exited 0"));
}
