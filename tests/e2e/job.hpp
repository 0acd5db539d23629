#pragma once
// Several ddprun agents on loopback acting as the nodes of one job (shared by the e2e tests).
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "e2e/procs.hpp"
#include "support/paths.hpp"

namespace ddprun::test {

using namespace std::chrono_literals;

struct Job {
  TempDir dir;
  std::string token = "ddprun-e2e-" + std::to_string(::getpid()) + "-" + std::to_string(free_port());
  int port = free_port();
  std::vector<Proc> agents;
  std::map<std::string, std::string> env;            // more variables for the agents
  std::map<int, int> port_of;                        // node rank -> another rendezvous port (a ByteProxy's)
  std::map<int, std::vector<std::string>> extra_of;  // node rank -> more options for that agent alone
  std::vector<std::string> wrapper;                  // each agent runs through it (e.g. old_kernel)

  // Starts `nnodes` agents, each running `nproc` workers of `command`.
  void start(int nnodes, int nproc, const std::vector<std::string>& command,
             std::vector<std::string> extra = {}) {
    for (int n = 0; n < nnodes; ++n) {
      std::vector<std::string> argv = {ddprun_test::ddprun_exe(),
                                       "--nnodes",
                                       std::to_string(nnodes),
                                       "--node-rank",
                                       std::to_string(n),
                                       "--rdzv-endpoint",
                                       "127.0.0.1:" + std::to_string(port_of.count(n) ? port_of[n] : port),
                                       "--nproc-per-node",
                                       std::to_string(nproc),
                                       "--rdzv-timeout",
                                       "60",
                                       "--term-timeout",
                                       "3"};
      argv.insert(argv.begin(), wrapper.begin(), wrapper.end());
      argv.insert(argv.end(), extra.begin(), extra.end());
      if (const auto it = extra_of.find(n); it != extra_of.end())
        argv.insert(argv.end(), it->second.begin(), it->second.end());
      argv.push_back("--");
      argv.insert(argv.end(), command.begin(), command.end());
      auto vars = env;
      vars["DDPRUN_TEST_TOKEN"] = token;
      vars["DIR"] = dir.path();
      agents.push_back(ddprun::test::start(argv, vars, dir.path(), "agent" + std::to_string(n)));
    }
  }
  void wait_all(std::chrono::milliseconds limit = 120s) {
    for (auto& a : agents) CHECK(wait_for(a, limit));
  }
  ~Job() {
    for (auto& a : agents) wait_for(a, 1ms);
    leftovers_after(token, 1ms);
  }
};

inline std::vector<std::string> sh(const std::string& script) {
  return {"/bin/sh", "-c", script};
}

inline const std::string kFake = ddprun_test::fake_worker();

}  // namespace ddprun::test
