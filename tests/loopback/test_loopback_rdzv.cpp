// Rendezvous with real agent processes on loopback (rdzv_agent), including agents dying by
// SIGKILL or stopping by SIGSTOP. Every child runs in its own process group and is killed on the
// way out, also when an assertion fails.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

using ddprun::test::TempDir;

struct Agent {
  pid_t pid = -1;
  fs::path out;
  std::optional<int> status;

  Agent(const std::vector<std::string>& args, fs::path out_file) : out(std::move(out_file)) {
    std::vector<std::string> argv_s = {RDZV_AGENT_EXE};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::setpgid(0, 0);
      FILE* f = std::fopen(out.c_str(), "w");
      if (f == nullptr) ::_exit(127);
      ::dup2(::fileno(f), 1);
      std::vector<char*> argv;
      for (auto& s : argv_s) argv.push_back(s.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::setpgid(pid, pid);
  }
  ~Agent() { kill_all(); }
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  void kill_all() {
    if (pid > 0 && !status) {
      ::kill(-pid, SIGKILL);
      ::kill(-pid, SIGCONT);
      int st = 0;
      ::waitpid(pid, &st, 0);
      status = st;
    }
  }
  void signal(int sig) const { ::kill(pid, sig); }

  // Exit code once it exited within `limit`, else nullopt.
  std::optional<int> wait_exit(std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!status) {
      int st = 0;
      const pid_t r = ::waitpid(pid, &st, WNOHANG);
      if (r == pid) {
        status = st;
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(5ms);
    }
    if (WIFEXITED(*status)) return WEXITSTATUS(*status);
    return 128 + WTERMSIG(*status);
  }

  std::string output() const {
    std::ifstream in(out);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // The first line starting with `prefix`, waiting for it up to `limit`.
  std::optional<std::string> line(const std::string& prefix, std::chrono::milliseconds limit = 60s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      std::istringstream in(output());
      for (std::string l; std::getline(in, l);) {
        if (l.rfind(prefix, 0) == 0) return l;
      }
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(10ms);
    }
  }
};

std::string read_port(const fs::path& file) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(file);
    std::string p;
    if (in >> p) return p;
    std::this_thread::sleep_for(10ms);
  }
  FAIL("the master never reported its port");
  return {};
}

// Starts n agents (master first, on an ephemeral port) and waits until all have the plan.
struct Cluster {
  TempDir dir;
  std::vector<std::unique_ptr<Agent>> agents;
  std::string port;

  Cluster(int n, const std::vector<std::vector<std::string>>& extra = {}) {
    auto args = [&](int r) {
      std::vector<std::string> a = {"--node-rank", std::to_string(r), "--nnodes", std::to_string(n)};
      if (static_cast<std::size_t>(r) < extra.size()) {
        a.insert(a.end(), extra[static_cast<std::size_t>(r)].begin(),
                 extra[static_cast<std::size_t>(r)].end());
      }
      return a;
    };
    auto a0 = args(0);
    a0.insert(a0.end(), {"--port", "0", "--port-file", (dir.path() / "port").string()});
    agents.push_back(std::make_unique<Agent>(a0, dir.path() / "agent0.out"));
    port = read_port(dir.path() / "port");
    for (int r = 1; r < n; ++r) {
      auto a = args(r);
      a.insert(a.end(), {"--port", port});
      agents.push_back(std::make_unique<Agent>(a, dir.path() / fmt_out(r)));
    }
  }
  static std::string fmt_out(int r) { return "agent" + std::to_string(r) + ".out"; }
  void require_plans() {
    for (std::size_t r = 0; r < agents.size(); ++r) {
      INFO("agent " << r << ": " << agents[r]->output());
      auto l = agents[r]->line("PLAN ");
      REQUIRE(l.has_value());
      std::istringstream in(l->substr(5));
      int node_rank = -1, nnodes = -1, world = -1, mport = -1;
      in >> node_rank >> nnodes >> world >> mport;
      CHECK(node_rank == static_cast<int>(r));
      CHECK(nnodes == static_cast<int>(agents.size()));
      CHECK(world == 2 * nnodes);
      CHECK(std::to_string(mport) != port);
    }
  }
  nlohmann::json abort_of(std::size_t r, std::chrono::milliseconds limit = 30s) {
    auto l = agents[r]->line("ABORT ", limit);
    INFO("agent " << r << ": " << agents[r]->output());
    REQUIRE(l.has_value());
    return nlohmann::json::parse(l->substr(6));
  }
};

}  // namespace

TEST_CASE("loopback: 2, 8 and 16 agent processes rendezvous and pass the exit barrier", "[loopback]") {
  for (int n : {2, 8, 16}) {
    INFO(n << " agents");
    std::vector<std::vector<std::string>> extra(static_cast<std::size_t>(n),
                                                std::vector<std::string>{"--mode", "barrier"});
    Cluster c(n, extra);
    c.require_plans();
    for (std::size_t r = 0; r < c.agents.size(); ++r) {
      auto& a = c.agents[r];
      INFO(a->output());
      CHECK(a->wait_exit(60s) == 0);
      CHECK(a->line("BARRIER 1", 0ms).has_value());
      // Each agent receives the plan, then at most 64 bytes per node and 4 KB beyond it (issue 16):
      // the join's answers, the pongs, the barrier.
      const auto got = a->line("RECEIVED ", 0ms);
      REQUIRE(got.has_value());
      std::istringstream in(got->substr(9));
      std::uint64_t bytes = 0, plan = 0;
      in >> bytes >> plan;
      CHECK(plan > 0);
      CHECK(bytes <= plan + 64 * static_cast<std::uint64_t>(n) + 4096);
    }
  }
}

TEST_CASE("loopback: a SIGKILLed agent makes every other agent abort, naming it", "[loopback]") {
  Cluster c(4);
  c.require_plans();
  c.agents[2]->signal(SIGKILL);
  for (std::size_t r : {0u, 1u, 3u}) {
    const auto j = c.abort_of(r);
    CHECK(j.at("node_rank") == 2);
    CHECK(j.at("host") == "host-2");
    CHECK(j.at("exit_code") == 1);
    CHECK(c.agents[r]->wait_exit(30s) == 1);
  }
}

TEST_CASE("loopback: a SIGKILLed master is noticed by every agent", "[loopback]") {
  Cluster c(3);
  c.require_plans();
  c.agents[0]->signal(SIGKILL);
  for (std::size_t r : {1u, 2u}) {
    const auto j = c.abort_of(r);
    CHECK(j.at("node_rank") == 0);
    CHECK(j.at("reason").get<std::string>().find("lost the rendezvous store") != std::string::npos);
    CHECK(c.agents[r]->wait_exit(30s) == 1);
  }
}

TEST_CASE("loopback: a SIGSTOPped master is noticed by every agent: its heartbeats go unanswered",
          "[loopback]") {
  Cluster c(3);
  c.require_plans();
  c.agents[0]->signal(SIGSTOP);
  // Bound: the master timeout (2 × 1.5 s here); generous for loaded or TSan runs.
  for (std::size_t r : {1u, 2u}) {
    const auto j = c.abort_of(r, 30s);
    CHECK(j.at("node_rank") == 0);
    const auto reason = j.at("reason").get<std::string>();
    CHECK(reason.find("lost the rendezvous store") != std::string::npos);
    CHECK(reason.find("no answer to heartbeats") != std::string::npos);
    CHECK(c.agents[r]->wait_exit(30s) == 1);
  }
  c.agents[0]->kill_all();
}

TEST_CASE("loopback: each agent holds one connection to the master, its own agent included", "[loopback]") {
  Cluster c(4);
  c.require_plans();
  for (auto& a : c.agents) REQUIRE(a->line("WATCHING", 30s).has_value());
  // Every agent watches now: count the connections the master's store serves (server side: the
  // store port is their source port).
  const std::string port = c.port;
  const std::string cmd = "ss -Htn state established '( sport = :" + port + " )' | wc -l";
  FILE* f = ::popen(cmd.c_str(), "r");
  REQUIRE(f != nullptr);
  int n = -1;
  REQUIRE(std::fscanf(f, "%d", &n) == 1);
  ::pclose(f);
  CHECK(n == 4);
}

TEST_CASE("loopback: a SIGSTOPped agent misses its heartbeats and the job aborts", "[loopback]") {
  Cluster c(3);
  c.require_plans();
  c.agents[1]->signal(SIGSTOP);
  for (std::size_t r : {0u, 2u}) {
    const auto j = c.abort_of(r);
    CHECK(j.at("node_rank") == 1);
    CHECK(j.at("reason").get<std::string>().find("heartbeat") != std::string::npos);
  }
  c.agents[1]->kill_all();
}

TEST_CASE("loopback: an agent that stops or dies right after the plan, before watching, is lost",
          "[loopback]") {
  for (const std::string mode : {"stop-before-watch", "exit-before-watch"}) {
    INFO(mode);
    Cluster c(3, {{}, {"--mode", mode}, {}});
    c.require_plans();
    // Bound: the heartbeat timeout (1.5 s); generous for loaded or TSan runs.
    for (std::size_t r : {0u, 2u}) {
      const auto j = c.abort_of(r, 20s);
      CHECK(j.at("node_rank") == 1);
      CHECK(j.at("host") == "host-1");
      const auto reason = j.at("reason").get<std::string>();
      CHECK(reason.find("lost the agent on host-1") != std::string::npos);
      // Its heartbeats began when it arrived: a stopped one misses them, a dead one's connection closes.
      CHECK(reason.find(mode == "stop-before-watch" ? "heartbeat" : "connection closed") !=
            std::string::npos);
      CHECK(c.agents[r]->wait_exit(30s) == 1);
    }
    c.agents[1]->kill_all();
  }
}

TEST_CASE("loopback: the root cause's exit code reaches every agent", "[loopback]") {
  Cluster c(3, {{}, {}, {"--mode", "abort", "--abort-code", "7"}});
  c.require_plans();
  for (std::size_t r = 0; r < 3; ++r) {
    const auto j = c.abort_of(r);
    CHECK(j.at("exit_code") == 7);
    CHECK(j.at("node_rank") == 2);
    CHECK(c.agents[r]->wait_exit(30s) == 7);
  }
}

TEST_CASE("loopback: an agent of another run is refused with a clear error", "[loopback]") {
  Cluster c(2);
  c.require_plans();
  Agent stranger({"--node-rank", "1", "--nnodes", "2", "--port", c.port, "--run-id", "other"},
                 c.dir.path() / "stranger.out");
  CHECK(stranger.wait_exit(30s) == 2);
  const auto l = stranger.line("ERROR ", 0ms);
  REQUIRE(l.has_value());
  CHECK(l->find("run id mismatch") != std::string::npos);
}
