#pragma once
// Runs a program to completion with only the given environment (tests only), on the e2e process helpers.
#include <map>
#include <string>
#include <vector>

#include "e2e/procs.hpp"

namespace ddprun::test {

struct ProcResult {
  int code = -1;
  std::string out;
  std::string err;
};

// `env` replaces the environment entirely (a standard PATH is added when missing).
inline ProcResult run_process(const std::vector<std::string>& argv,
                              std::map<std::string, std::string> env = {}) {
  TempDir dir;
  if (env.find("PATH") == env.end()) env["PATH"] = "/usr/local/bin:/usr/bin:/bin";
  Proc p = start(argv, env, dir.path(), "proc", false);
  ProcResult r;
  if (p.pid < 0) return r;
  wait_for(p, std::chrono::seconds(120));
  r.code = p.code;
  r.out = p.out();
  r.err = p.err();
  return r;
}

}  // namespace ddprun::test
