// Two to four real ddprun agents on loopback acting as nodes: teardown everywhere, exit codes,
// signals, agents killed, restarts, and logs.
#include <catch2/catch.hpp>

#include <regex>

#include "e2e/job.hpp"
#include "support/paths.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;

TEST_CASE("a worker failure on one node tears down every node with its exit code", "[e2e][teardown]") {
  Job job;
  // Rank 4 lives on node 2; everyone else would run forever.
  job.start(
      3, 2,
      sh("if [ \"$RANK\" = 4 ]; then exec " + kFake + " sleep 300 exit 7; else exec " + kFake + " hang; fi"));
  job.wait_all();
  for (auto& a : job.agents) {
    INFO(a.err());
    CHECK(a.code == 7);
  }
  CHECK_THAT(job.agents[0].err(), Catch::Contains("exit code : 7") && Catch::Contains(": 4 (local rank 0)"));
  CHECK(leftovers_after(job.token, 5s).empty());
}

TEST_CASE("a worker whose last words are not UTF-8 is still every node's named root cause",
          "[e2e][teardown]") {
  Job job;
  // Rank 3 (node 1, local rank 1) writes invalid UTF-8 to stderr and exits 5; the failure record
  // that carries its stderr tail to the other nodes must survive those bytes. --verbose: every
  // node prints its full report (by default only node 0 does).
  job.start(3, 2,
            sh("if [ \"$RANK\" = 3 ]; then printf 'bad utf8: \\377\\376\\n' >&2; exec " + kFake +
               " sleep 300 exit 5; else exec " + kFake + " hang; fi"),
            {"--verbose"});
  job.wait_all();
  for (auto& a : job.agents) {
    INFO(a.err());
    CHECK(a.code == 5);
    CHECK_THAT(a.err(), Catch::Contains(": 3 (local rank 1)") && Catch::Contains("bad utf8"));
    CHECK_THAT(a.err(), !Catch::Contains("lost the agent"));
  }
  CHECK(leftovers_after(job.token, 5s).empty());
}

TEST_CASE("a worker killed by a signal gives 128+signal on every node", "[e2e][teardown]") {
  Job job;
  job.start(2, 1,
            sh("if [ \"$RANK\" = 1 ]; then exec " + kFake + " sleep 200 signal 9; else exec " + kFake +
               " hang; fi"));
  job.wait_all();
  for (auto& a : job.agents) CHECK(a.code == 137);
  CHECK(leftovers_after(job.token, 5s).empty());
}

TEST_CASE("SIGTERM to one agent reaches the workers and the job never reports success", "[e2e][signals]") {
  Job job;
  job.start(2, 1, sh("exec " + kFake + " trap-term \"$DIR/term_$RANK\" touch \"$DIR/ready_$RANK\" hang"));
  REQUIRE(wait_file(job.dir / "ready_0"));
  REQUIRE(wait_file(job.dir / "ready_1"));
  ::kill(job.agents[1].pid, SIGTERM);
  job.wait_all();
  // Both workers trapped TERM and exited 0, yet the job was stopped: 128+SIGTERM on every node.
  CHECK(read_file(job.dir / "term_1") == "TERM\n");
  CHECK(read_file(job.dir / "term_0") == "TERM\n");
  for (auto& a : job.agents) {
    INFO(a.err());
    CHECK(a.code == 143);
  }
  CHECK(leftovers_after(job.token, 5s).empty());
}

TEST_CASE("SIGUSR1 is forwarded and the job continues", "[e2e][signals]") {
  Job job;
  job.start(
      1, 2,
      sh("exec " + kFake + " trap 10 \"$DIR/usr1_$RANK\" touch \"$DIR/ready_$RANK\" wait-file \"$DIR/go\""));
  REQUIRE(wait_file(job.dir / "ready_0"));
  REQUIRE(wait_file(job.dir / "ready_1"));
  ::kill(job.agents[0].pid, SIGUSR1);
  CHECK(wait_file(job.dir / "usr1_0", 20s));
  CHECK(wait_file(job.dir / "usr1_1", 20s));
  std::ofstream(job.dir / "go").put('\n');
  job.wait_all();
  CHECK(job.agents[0].code == 0);
  CHECK(read_file(job.dir / "usr1_0") == "10\n");
}

namespace {
// Whether a process is gone (or a zombie): it was re-parented away from us, so look at /proc.
bool gone(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  return stat.empty() || (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z');
}
}  // namespace

TEST_CASE("SIGUSR1 and SIGUSR2 reach the worker only: its children without a handler live on",
          "[e2e][signals]") {
  Job job;
  // The background sleep stands for a DataLoader worker: no handler, so USR1/USR2 would kill it.
  job.start(
      1, 2,
      sh("trap 'echo $RANK >> \"$DIR/usr_$RANK\"' USR1 USR2; sleep 300 & echo $! > \"$DIR/child_$RANK\"; "
         "touch \"$DIR/ready_$RANK\"; while [ ! -e \"$DIR/go\" ]; do wait; done; exit 0"));
  REQUIRE(wait_file(job.dir / "ready_0"));
  REQUIRE(wait_file(job.dir / "ready_1"));
  const pid_t child0 = std::stoi(read_file(job.dir / "child_0"));
  const pid_t child1 = std::stoi(read_file(job.dir / "child_1"));
  ::kill(job.agents[0].pid, SIGUSR1);
  ::kill(job.agents[0].pid, SIGUSR2);
  REQUIRE(wait_file(job.dir / "usr_0", 20s));
  REQUIRE(wait_file(job.dir / "usr_1", 20s));
  std::this_thread::sleep_for(200ms);  // a group signal would have killed them by now
  CHECK_FALSE(gone(child0));
  CHECK_FALSE(gone(child1));
  std::ofstream(job.dir / "go").put('\n');
  ::kill(job.agents[0].pid, SIGUSR1);  // wakes the workers' wait
  job.wait_all();
  CHECK(job.agents[0].code == 0);
  CHECK(leftovers_after(job.token, 5s).empty());
}

TEST_CASE("after SIGUSR2 every rank gets the grace: one exits at once, the other finishes its checkpoint",
          "[e2e][signals]") {
  Job job;
  // Rank 1 has nothing to save and exits 140 at once; rank 0 takes a second to write its checkpoint.
  job.start(2, 1,
            sh("trap 'if [ $RANK = 0 ]; then sleep 1; echo saved > \"$DIR/saved_$RANK\"; fi; exit 140' USR2; "
               "sleep 300 & touch \"$DIR/ready_$RANK\"; wait"));
  REQUIRE(wait_file(job.dir / "ready_0"));
  REQUIRE(wait_file(job.dir / "ready_1"));
  for (auto& a : job.agents) ::kill(a.pid, SIGUSR2);  // srun passes it to every agent
  // Node 1, whose rank is done, stays until its grace is over: an earlier exit would let srun
  // --kill-on-bad-exit TERM rank 0 in the middle of its checkpoint.
  REQUIRE(wait_file(job.dir / "saved_0", 20s));
  CHECK(::waitpid(job.agents[1].pid, nullptr, WNOHANG) == 0);
  job.wait_all();
  CHECK(read_file(job.dir / "saved_0") == "saved\n");
  for (auto& a : job.agents) {
    INFO(a.err());
    CHECK(a.code == 140);
    CHECK_THAT(a.err(), Catch::Contains("stopped after SIGUSR2 with exit code 140"));
    CHECK_THAT(a.err(), !Catch::Contains("job failed") && !Catch::Contains("Root cause"));
  }
  CHECK(leftovers_after(job.token, 5s).empty());
}

TEST_CASE("a stopping signal right after the run never changes the root cause's exit code",
          "[e2e][signals]") {
  // srun --kill-on-bad-exit TERMs every agent once one exits with the root cause's code. The test hook
  // raises SIGTERM in each agent the moment its run has ended, the narrowest place for it to land.
  Job job;
  for (int n = 0; n < 2; ++n) {
    std::vector<std::string> argv = {ddprun_test::ddprun_exe(),
                                     "--nnodes",
                                     "2",
                                     "--node-rank",
                                     std::to_string(n),
                                     "--rdzv-endpoint",
                                     "127.0.0.1:" + std::to_string(job.port),
                                     "--term-timeout",
                                     "3",
                                     "--",
                                     "/bin/sh",
                                     "-c",
                                     "if [ $RANK = 1 ]; then exit 7; fi; exec " + kFake + " hang"};
    job.agents.push_back(start(argv,
                               {{"DDPRUN_TEST_TOKEN", job.token}, {"DDPRUN_TEST_RAISE_AFTER_RUN", "15"}},
                               job.dir.path(), "agent" + std::to_string(n)));
  }
  job.wait_all();
  for (auto& a : job.agents) {
    INFO(a.err());
    CHECK(a.code == 7);
  }
}

TEST_CASE("a stopping signal between a failed attempt and its restart stops the job with 128 + signal",
          "[e2e][signals]") {
  Job job;
  job.agents.push_back(start(
      {ddprun_test::ddprun_exe(), "--nproc-per-node", "1", "--max-restarts", "3", "--", "/bin/sh", "-c",
       "echo x >> \"$DIR/runs\"; exit 7"},
      {{"DDPRUN_TEST_TOKEN", job.token}, {"DIR", job.dir.path()}, {"DDPRUN_TEST_RAISE_AFTER_RUN", "15"}},
      job.dir.path(), "agent0"));
  job.wait_all();
  INFO(job.agents[0].err());
  CHECK(job.agents[0].code == 143);  // the stop cancelled a restart: the job is stopped, not failed
  CHECK(read_file(job.dir / "runs") == "x\n");  // no restart after the stop
}

TEST_CASE("SIGKILL of the master agent: the other node exits non-zero and no worker survives",
          "[e2e][kill]") {
  Job job;
  job.start(2, 2, sh("touch \"$DIR/ready_$RANK\"; exec " + kFake + " hang"));
  for (int r = 0; r < 4; ++r) REQUIRE(wait_file(job.dir / ("ready_" + std::to_string(r))));
  ::kill(job.agents[0].pid, SIGKILL);
  REQUIRE(wait_for(job.agents[1], 60s));
  CHECK(job.agents[1].code != 0);
  CHECK_THAT(job.agents[1].err(), Catch::Contains("rendezvous store") || Catch::Contains("lost"));
  wait_for(job.agents[0], 5s);
  CHECK(leftovers_after(job.token, 5s).empty());
}

TEST_CASE("SIGKILL of a non-master agent: the master exits non-zero and no worker survives", "[e2e][kill]") {
  Job job;
  job.start(3, 1, sh("touch \"$DIR/ready_$RANK\"; exec " + kFake + " hang"));
  for (int r = 0; r < 3; ++r) REQUIRE(wait_file(job.dir / ("ready_" + std::to_string(r))));
  ::kill(job.agents[1].pid, SIGKILL);
  REQUIRE(wait_for(job.agents[0], 60s));
  REQUIRE(wait_for(job.agents[2], 60s));
  CHECK(job.agents[0].code != 0);
  CHECK(job.agents[2].code == job.agents[0].code);
  CHECK(leftovers_after(job.token, 5s).empty());
}

TEST_CASE("restarts: a new round with TORCHELASTIC_RESTART_COUNT incremented", "[e2e][restart]") {
  Job job;
  // Attempt 0 fails on rank 2; attempt 1 succeeds everywhere.
  job.start(2, 2,
            sh("echo \"$TORCHELASTIC_RESTART_COUNT\" >> \"$DIR/attempts_$RANK\"; "
               "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && [ \"$RANK\" = 2 ]; then "
               "  for i in $(seq 1 3000); do [ $(cat \"$DIR\"/attempts_* | wc -l) -ge 4 ] && break; sleep "
               "0.01; done; "
               "  exit 5; fi; "
               "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then sleep 300; fi"),
            {"--max-restarts", "2"});
  job.wait_all();
  for (auto& a : job.agents) {
    INFO(a.err());
    CHECK(a.code == 0);
  }
  CHECK(read_file(job.dir / "attempts_0") == "0\n1\n");
  CHECK(read_file(job.dir / "attempts_3") == "0\n1\n");
}

TEST_CASE("restarts with --worker-store relay: no node reports node 0's store lost", "[e2e][restart]") {
  // Node 0 resets the workers' store for the next attempt; the other nodes' relays of the attempt that
  // ended are gone by then, so an ordinary restart is silent. Rank 1 fails only once ranks 0 and 2 have
  // started the attempt, so every attempt is seen on every node.
  Job job;
  job.start(3, 1,
            sh("echo \"$TORCHELASTIC_RESTART_COUNT\" >> \"$DIR/attempts_$RANK\"; "
               "[ \"$TORCHELASTIC_RESTART_COUNT\" != 2 ] || exit 0; "
               "if [ \"$RANK\" = 1 ]; then for i in $(seq 1 3000); do "
               "[ $(cat \"$DIR/attempts_0\" \"$DIR/attempts_2\" 2>/dev/null | grep -cx "
               "\"$TORCHELASTIC_RESTART_COUNT\") "
               "-ge 2 ] && break; sleep 0.01; done; exit 5; fi; "
               "exec " +
               kFake + " hang"),
            {"--max-restarts", "2", "--worker-store", "relay"});
  job.wait_all();
  for (auto& a : job.agents) {
    INFO(a.err());
    CHECK(a.code == 0);
    CHECK_THAT(a.err(), !Catch::Contains("node 0's store"));
  }
  CHECK(read_file(job.dir / "attempts_2") == "0\n1\n2\n");
}

TEST_CASE("restarts give up after --max-restarts and report the last root cause", "[e2e][restart]") {
  Job job;
  // Rank 1 fails only once rank 0 has recorded this attempt, so every attempt is seen on both nodes.
  job.start(2, 1,
            sh("echo x >> \"$DIR/runs_$RANK\"; if [ \"$RANK\" = 1 ]; then "
               "for i in $(seq 1 3000); do [ $(cat \"$DIR/runs_0\" 2>/dev/null | wc -l) -gt "
               "\"$TORCHELASTIC_RESTART_COUNT\" ] && break; sleep 0.01; done; exit 9; fi; sleep 300"),
            {"--max-restarts", "1"});
  job.wait_all();
  for (auto& a : job.agents) CHECK(a.code == 9);
  CHECK(read_file(job.dir / "runs_0") == "x\nx\n");
}

TEST_CASE("worker output crosses agents whole, prefixed, and complete", "[e2e][logs]") {
  Job job;
  const int n = 50000;
  job.start(2, 2, {kFake, "lines", std::to_string(n), "out", "partial", "tail"});
  job.wait_all();
  for (int node = 0; node < 2; ++node) {
    std::istringstream in(job.agents[static_cast<std::size_t>(node)].out());
    std::map<int, int> next;  // rank -> next expected line number
    std::map<int, bool> tail;
    std::string line;
    static const std::regex kLine(R"(\[(\d+)\]: line (\d+))");
    static const std::regex kTail(R"(\[(\d+)\]: tail)");
    int bad = 0;
    while (std::getline(in, line)) {
      std::smatch m;
      if (std::regex_match(line, m, kLine)) {
        int r = std::stoi(m[1]);
        if (std::stoi(m[2]) != next[r]) ++bad;
        next[r] = std::stoi(m[2]) + 1;
      } else if (std::regex_match(line, m, kTail)) {
        tail[std::stoi(m[1])] = true;
      } else {
        ++bad;
      }
    }
    CHECK(bad == 0);
    REQUIRE(next.size() == 2);
    for (auto& [r, count] : next) {
      CHECK(r / 2 == node);
      CHECK(count == n);
      CHECK(tail[r]);
    }
  }
}

TEST_CASE("per-task mode: every task runs exactly its own worker, with Slurm's rank, in a cyclic layout",
          "[e2e][per-task]") {
  // srun --distribution=cyclic: task p on node p % 2. Each task derives only its own worker from the
  // published table (it once also ran the block layout's worker of the same rank).
  TempDir dir;
  const std::string token = "ddprun-e2e-pt-" + std::to_string(::getpid());
  const int port = free_port();
  std::vector<Proc> tasks;
  for (int p = 0; p < 4; ++p) {
    const std::map<std::string, std::string> env = {{"SLURM_JOB_ID", std::to_string(port)},
                                                    {"SLURM_STEP_ID", "0"},
                                                    {"SLURM_STEP_NODELIST", "localhost,127.0.0.1"},
                                                    {"SLURM_NODELIST", "localhost,127.0.0.1"},
                                                    {"SLURM_STEP_NUM_NODES", "2"},
                                                    {"SLURM_STEP_NUM_TASKS", "4"},
                                                    {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
                                                    {"SLURM_NODEID", std::to_string(p % 2)},
                                                    {"SLURM_PROCID", std::to_string(p)},
                                                    {"SLURM_LOCALID", std::to_string(p / 2)},
                                                    {"CUDA_VISIBLE_DEVICES", "NoDevFiles"},
                                                    {"DDPRUN_TEST_TOKEN", token}};
    tasks.push_back(
        start({ddprun_test::ddprun_exe(), "--rdzv-endpoint", "127.0.0.1:" + std::to_string(port),
               "--rdzv-auth", "none", "--rdzv-timeout", "60", "--no-prefix", "-q", "--", "/bin/sh", "-c",
               "echo RANK=$RANK LOCAL_RANK=$LOCAL_RANK GROUP_RANK=$GROUP_RANK WORLD_SIZE=$WORLD_SIZE"},
              env, dir.path(), "task" + std::to_string(p)));
  }
  for (auto& t : tasks) CHECK(wait_for(t, 120s));
  for (int p = 0; p < 4; ++p) {
    const auto& t = tasks[static_cast<std::size_t>(p)];
    INFO("task " << p << ": " << t.err());
    CHECK(t.code == 0);
    const std::string want = "RANK=" + std::to_string(p) + " LOCAL_RANK=" + std::to_string(p / 2) +
                             " GROUP_RANK=" + std::to_string(p % 2) + " WORLD_SIZE=4\n";
    CHECK(t.out() == want);
  }
  CHECK(leftovers_after(token, 5s).empty());
}
