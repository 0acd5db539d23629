// The workers' store with real agents and real PyTorch workers on loopback (docs/rendezvous.md, "The
// workers' store"): init_process_group through node 0's agent with the default flags, for torch 1.13
// and torch 2.x; the store outliving worker rank 0; a fresh keyspace after a restart; garbage on the
// worker port while the workers start.
#include <catch2/catch.hpp>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <random>
#include <sstream>
#include <thread>

#include "e2e/procs.hpp"
#include "support/paths.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

const std::string kWorker = ddprun_test::source_dir() + "/tests/c10d/store_worker.py";

// The interpreters to run the workers with: Debian's torch 1.13, and the project's torch 2.x venv when
// it is installed (scripts/setup.sh; CMake passes its path).
std::vector<std::string> interpreters() {
  std::vector<std::string> out{"/usr/bin/python3"};
  const std::string torch2 = DDPRUN_TORCH2_PY;
  if (!torch2.empty() && ::access(torch2.c_str(), X_OK) == 0) {
    out.push_back(torch2);
  } else {
    WARN("no torch 2.x interpreter at '" << torch2 << "': only torch 1.13 runs (scripts/setup.sh)");
  }
  return out;
}

struct Job {
  TempDir dir;
  std::string token = "ddprun-c10d-" + std::to_string(::getpid()) + "-" + std::to_string(free_port());
  int port = free_port();
  int master_port = free_port();  // not 29500: a job beside this one may take it
  std::vector<Proc> agents;

  void start(int nodes, const std::string& python, const std::string& mode,
             std::vector<std::string> extra = {}, const std::string& nnodes = "") {
    for (int n = 0; n < nodes; ++n) {
      std::vector<std::string> argv = {ddprun_test::ddprun_exe(),
                                       "--nnodes",
                                       nnodes.empty() ? std::to_string(nodes) : nnodes,
                                       "--node-rank",
                                       std::to_string(n),
                                       "--rdzv-endpoint",
                                       "127.0.0.1:" + std::to_string(port),
                                       "--nproc-per-node",
                                       "2",
                                       "--python",
                                       python,
                                       "--rdzv-timeout",
                                       "120",
                                       "--master-port",
                                       std::to_string(master_port)};
      argv.insert(argv.end(), extra.begin(), extra.end());
      argv.insert(argv.end(), {kWorker, mode, dir.path()});
      agents.push_back(
          ddprun::test::start(argv, {{"DDPRUN_TEST_TOKEN", token}}, dir.path(), "agent" + std::to_string(n)));
    }
  }
  void finish(int expected_code = 0) {
    for (auto& a : agents) {
      REQUIRE(wait_for(a, 280s));
      INFO(a.err());
      CHECK(a.code == expected_code);
    }
  }
  std::string file(const std::string& name) { return read_file(dir / name); }
  ~Job() {
    for (auto& a : agents) wait_for(a, 1ms);
    leftovers_after(token, 1ms);
  }
};

// What store_worker.py init wrote: all-reduce result, expected, TORCHELASTIC_USE_AGENT_STORE, whether
// the MASTER_PORT listener is the worker's own, how many listeners, the interpreter.
struct InitRecord {
  double got = 0, expected = 0;
  std::string agent_store;
  int mine = -1, listeners = -1;
  std::string python;
};
InitRecord init_record(const std::string& text) {
  InitRecord r;
  std::istringstream in(text);
  in >> r.got >> r.expected >> r.agent_store >> r.mine >> r.listeners >> r.python;
  return r;
}

}  // namespace

TEST_CASE("workers' store: init_process_group through node 0's agent with the default flags", "[c10d][e2e]") {
  for (const auto& python : interpreters()) {
    DYNAMIC_SECTION(python) {
      Job job;
      job.start(2, python, "init");
      job.finish();
      for (int r = 0; r < 4; ++r) {
        const InitRecord rec = init_record(job.file("init_" + std::to_string(r)));
        INFO("rank " << r);
        CHECK(rec.got == 10.0);
        CHECK(rec.expected == 10.0);
        CHECK(rec.python == python);
        CHECK(rec.agent_store == "True");
        // The store is the agent's: no worker, rank 0 included, listens on MASTER_PORT.
        CHECK(rec.mine == 0);
        CHECK(rec.listeners == 1);
      }
      CHECK(leftovers_after(job.token, 10s).empty());
    }
  }
}

TEST_CASE("workers' store: --worker-store rank0 keeps worker rank 0 as the host", "[c10d][e2e]") {
  Job job;
  job.start(2, "/usr/bin/python3", "init", {"--worker-store", "rank0"});
  job.finish();
  for (int r = 0; r < 4; ++r) {
    const InitRecord rec = init_record(job.file("init_" + std::to_string(r)));
    INFO("rank " << r);
    CHECK(rec.got == 10.0);
    CHECK(rec.agent_store == "False");
    CHECK(rec.mine == (r == 0 ? 1 : 0));
  }
}

TEST_CASE("workers' store: the store outlives worker rank 0", "[c10d][e2e]") {
  Job job;
  job.start(2, "/usr/bin/python3", "outlive");
  job.finish();
  CHECK(job.file("outlive_0") == "left\n");
  for (int r = 1; r < 4; ++r) {
    INFO("rank " << r);
    CHECK(job.file("outlive_" + std::to_string(r)).starts_with("ok "));
  }
}

TEST_CASE("workers' store: a restart starts from a fresh keyspace", "[c10d][e2e]") {
  for (const auto& python : interpreters()) {
    DYNAMIC_SECTION(python) {
      Job job;
      job.start(2, python, "fresh", {"--max-restarts", "1", "--term-timeout", "3"});
      job.finish();
      for (int r = 0; r < 4; ++r) {
        INFO("rank " << r);
        CHECK(job.file("fresh_0_" + std::to_string(r)) == "4\n");
        // 8 if the second attempt's workers had found the first attempt's counter.
        CHECK(job.file("fresh_1_" + std::to_string(r)) == "4\n");
      }
    }
  }
}

TEST_CASE("workers' store: after the master's node is lost, the new master serves a fresh one",
          "[c10d][e2e]") {
  Job job;
  // Elastic, 2 to 3 nodes: losing node 0 leaves 2 of 3, a strict majority.
  job.start(3, "/usr/bin/python3", "failover", {"--max-restarts", "2", "--term-timeout", "3"}, "2:3");
  for (int r = 0; r < 6; ++r) REQUIRE(wait_file(job.dir / ("ready_" + std::to_string(r)), 200s));
  ::kill(job.agents[0].pid, SIGKILL);
  for (int n : {1, 2}) {
    REQUIRE(wait_for(job.agents[static_cast<std::size_t>(n)], 200s));
    INFO("agent " << n << ": " << job.agents[static_cast<std::size_t>(n)].err());
    CHECK(job.agents[static_cast<std::size_t>(n)].code == 0);
  }
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    std::istringstream in(job.file("failover_" + std::to_string(r)));
    int world = 0, attempt = -1, sum = 0, port = 0, pid = 0;
    std::string addr, agent_store;
    in >> world >> attempt >> sum >> addr >> port >> agent_store >> pid;
    CHECK(world == 4);
    CHECK(attempt == 1);
    CHECK(sum == 4);
    CHECK(agent_store == "True");
    // MASTER_ADDR/MASTER_PORT lead to the new master's agent (node 1), which listens there.
    CHECK(pid == job.agents[1].pid);
  }
  CHECK(leftovers_after(job.token, 10s).empty());
}

TEST_CASE("workers' store: garbage on the worker port while the workers start does not stop the job",
          "[c10d][e2e]") {
  Job job;
  std::atomic<bool> stop{false};
  std::atomic<int> sent{0};
  std::thread junk([&] {
    std::mt19937 rng(42);
    auto le64 = [](std::uint64_t v) {
      std::string s;
      for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>(static_cast<std::uint8_t>(v >> (8 * i))));
      return s;
    };
    const std::string validate("\x00\xce\xf7\x85\x3c", 5);
    std::vector<int> idle;  // connections that send nothing and stay open
    for (int i = 0; !stop; ++i) {
      const int fd = testnet::raw_connect(static_cast<std::uint16_t>(job.master_port));
      if (fd < 0) {
        std::this_thread::sleep_for(20ms);
        continue;
      }
      std::string bytes;
      switch (i % 5) {
        case 0:
          bytes = "GET / HTTP/1.1\r\nHost: node0\r\n\r\n";
          break;
        case 1:
          for (int k = 0; k < 512; ++k) bytes.push_back(static_cast<char>(rng()));
          break;
        case 2:  // a SET whose key claims 2^62 bytes
          bytes = validate + std::string(1, '\x01') + le64(std::uint64_t{1} << 62);
          break;
        case 3:  // a legacy ADD, then a MULTI_GET of 2^40 keys
          bytes = std::string(1, '\x03') + le64(5) + "junk/" + le64(1) + std::string(1, '\x09') +
                  le64(1ULL << 40);
          break;
        case 4:
          if (idle.size() < 50) {
            idle.push_back(fd);
            ++sent;
            continue;
          }
          bytes = validate + std::string(1, '\x7f');
          break;
      }
      testnet::send_all(fd, bytes);
      ::close(fd);
      ++sent;
      std::this_thread::sleep_for(5ms);
    }
    for (const int fd : idle) ::close(fd);
  });
  job.start(2, "/usr/bin/python3", "init");
  for (auto& a : job.agents) {
    REQUIRE(wait_for(a, 280s));
    INFO(a.err());
    CHECK(a.code == 0);
  }
  stop = true;
  junk.join();
  CHECK(sent > 20);
  for (int r = 0; r < 4; ++r) CHECK(init_record(job.file("init_" + std::to_string(r))).got == 10.0);
  // Each closed connection is one rate-limited line on node 0, never more than a few.
  CHECK_THAT(job.agents[0].err(), Catch::Contains("worker store: closed the connection of 127.0.0.1:"));
}
