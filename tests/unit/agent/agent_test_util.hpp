#pragma once
// Shared helpers for the agent tests: temp dirs, fake workers, and running the agent in a forked
// child so its console output, signals and death can be observed.
#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/coordinator.hpp"
#include "agent/supervisor.hpp"
#include "core/json.hpp"
#include "core/plan.hpp"
#include "report.hpp"
#include "support/paths.hpp"
#include "support/temp_dir.hpp"

namespace agent_test {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

inline std::string fake_worker() {
  return ddprun_test::fake_worker();
}

using ddprun::test::TempDir;

inline std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline bool wait_for_file(const std::string& path, std::chrono::seconds timeout = 30s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (fs::exists(path)) return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

// Workers of node 0, one per entry of `actions` (FAKE_WORKER_ACTIONS of that rank).
inline std::vector<ddprun::core::Worker> make_workers(const std::vector<std::string>& actions,
                                                      int node_rank = 0, int first_rank = 0) {
  std::vector<ddprun::core::Worker> ws;
  for (std::size_t i = 0; i < actions.size(); ++i) {
    ddprun::core::Worker w;
    w.node_rank = node_rank;
    w.host = "testhost";
    w.local_rank = static_cast<int>(i);
    w.rank = first_rank + static_cast<int>(i);
    w.env["RANK"] = std::to_string(w.rank);
    w.env["LOCAL_RANK"] = std::to_string(w.local_rank);
    w.env["FAKE_WORKER_ACTIONS"] = actions[i];
    ws.push_back(std::move(w));
  }
  return ws;
}

inline ddprun::agent::AgentOptions fake_options() {
  ddprun::agent::AgentOptions o;
  o.command = {fake_worker()};
  o.term_timeout = 5s;
  return o;
}

// fake_options without the agent's own lines on stderr.
inline ddprun::agent::AgentOptions quiet_options() {
  auto o = fake_options();
  o.quiet = true;
  return o;
}

// One run_workers call: the options, the attempt and where events go. Implicitly made from the options
// alone (attempt 0, no events), as most tests run.
struct AgentRun {
  AgentRun(ddprun::agent::AgentOptions o) : opts(std::move(o)) {}
  ddprun::agent::AgentOptions opts;
  ddprun::agent::AttemptContext attempt;
  ddprun::agent::Events* events = nullptr;
};

struct ChildRun {
  int status = -1;        // the agent child's wait status
  std::string out;        // its stdout (the relayed worker stdout)
  std::string err;        // its stderr
  nlohmann::json result;  // report_to_json of the RunResult (null if none)
  bool timed_out = false;
};

// Runs run_workers in a forked child with stdout/stderr captured in `dir`. `setup` runs in the
// child before run_workers; `during` runs in the parent with the child's pid while it runs.
inline ChildRun run_agent_in_child(const TempDir& dir, const std::vector<ddprun::core::Worker>& workers,
                                   int world_size, const AgentRun& run,
                                   const std::function<void(pid_t)>& during = {},
                                   const std::function<void()>& setup = {}) {
  const std::string out = dir / "agent.out";
  const std::string err = dir / "agent.err";
  const std::string res = dir / "agent.result.json";
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::FILE* o = std::freopen(out.c_str(), "w", stdout);
    std::FILE* e = std::freopen(err.c_str(), "w", stderr);
    if (o == nullptr || e == nullptr) ::_exit(90);
    try {
      if (setup) setup();
      ddprun::agent::LocalCoordinator coord;
      const auto r =
          ddprun::agent::run_workers(workers, world_size, run.opts, run.attempt, coord, run.events);
      std::ofstream(res) << ddprun::core::dump_json(ddprun::agent::report_to_json(r));  // as ddprun writes it
      ::_exit(0);
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "exception: %s\n", ex.what());
      std::fflush(stderr);
      ::_exit(91);
    }
  }
  ChildRun r;
  if (during) during(pid);
  const auto deadline = std::chrono::steady_clock::now() + 90s;
  for (;;) {
    const pid_t w = ::waitpid(pid, &r.status, WNOHANG);
    if (w == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      r.timed_out = true;
      ::kill(pid, SIGKILL);  // its workers follow through their death signal
      ::waitpid(pid, &r.status, 0);
      break;
    }
    std::this_thread::sleep_for(5ms);
  }
  r.out = read_file(out);
  r.err = read_file(err);
  const std::string text = read_file(res);
  if (!text.empty()) r.result = nlohmann::json::parse(text);
  return r;
}

inline std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < s.size()) {
    const auto nl = s.find('\n', start);
    if (nl == std::string::npos) {
      lines.push_back(s.substr(start));
      break;
    }
    lines.push_back(s.substr(start, nl - start));
    start = nl + 1;
  }
  return lines;
}

}  // namespace agent_test
