#pragma once
// Test support: start processes with captured output, wait with a deadline, find leftovers.
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/net_util.hpp"
#include "support/temp_dir.hpp"

extern char** environ;

namespace ddprun::test {

inline std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Proc {
  pid_t pid = -1;
  std::string out_path, err_path;
  int code = -1;  // exit code, or 128+signal
  bool done = false;

  std::string out() const { return read_file(out_path); }
  std::string err() const { return read_file(err_path); }
};

// Starts argv with the current environment plus `extra` (or, with inherit_env false, only `extra`
// and a standard PATH); stdout/stderr go to files in `dir`.
inline Proc start(const std::vector<std::string>& argv, const std::map<std::string, std::string>& extra,
                  const std::string& dir, const std::string& name, bool inherit_env = true) {
  Proc p;
  p.out_path = dir + "/" + name + ".out";
  p.err_path = dir + "/" + name + ".err";
  std::map<std::string, std::string> env;
  if (inherit_env) {
    for (char** e = environ; *e != nullptr; ++e) {
      std::string kv(*e);
      auto eq = kv.find('=');
      if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  } else {
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin";
  }
  for (auto it = env.begin(); it != env.end();) {  // never inherit the test runner's Slurm context
    it = it->first.rfind("SLURM_", 0) == 0 ? env.erase(it) : std::next(it);
  }
  for (const auto& [k, v] : extra) env[k] = v;
  std::vector<std::string> envs;
  for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
  std::vector<char*> cargv, cenv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const auto& e : envs) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, p.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, p.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  if (posix_spawn(&p.pid, cargv[0], &fa, nullptr, cargv.data(), cenv.data()) != 0) p.pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  return p;
}

// Waits for p; past `limit` kills it (SIGKILL) and returns false. Generous limits only avoid hangs.
inline bool wait_for(Proc& p, std::chrono::milliseconds limit) {
  if (p.done) return true;
  const auto end = std::chrono::steady_clock::now() + limit;
  while (true) {
    int status = 0;
    pid_t r = ::waitpid(p.pid, &status, WNOHANG);
    if (r == p.pid) {
      p.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      p.done = true;
      return true;
    }
    if (std::chrono::steady_clock::now() > end) {
      ::kill(p.pid, SIGKILL);
      ::waitpid(p.pid, &status, 0);
      p.code = -1;
      p.done = true;
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Whether p has exited, without waiting (reaps it when it has).
inline bool exited(Proc& p) {
  if (p.done) return true;
  int status = 0;
  if (::waitpid(p.pid, &status, WNOHANG) != p.pid) return false;
  p.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  p.done = true;
  return true;
}

// Pids of live processes whose command line or environment mentions `token`.
inline std::vector<pid_t> processes_with(const std::string& token) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0 || pid == ::getpid()) continue;
    const std::string base = std::string("/proc/") + e->d_name;
    std::string state = read_file(base + "/stat");
    auto rp = state.rfind(')');
    if (rp != std::string::npos && rp + 2 < state.size() && state[rp + 2] == 'Z') continue;  // zombie
    std::string blob = read_file(base + "/cmdline") + read_file(base + "/environ");
    if (blob.find(token) != std::string::npos) out.push_back(pid);
  }
  ::closedir(d);
  return out;
}

// Waits until no process mentions `token` (bounded), then SIGKILLs any left so tests never leak.
inline std::vector<pid_t> leftovers_after(const std::string& token, std::chrono::milliseconds grace) {
  const auto end = std::chrono::steady_clock::now() + grace;
  std::vector<pid_t> left;
  do {
    left = processes_with(token);
    if (left.empty()) return left;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (std::chrono::steady_clock::now() < end);
  for (pid_t p : left) ::kill(p, SIGKILL);
  return left;
}

// Waits until `path` exists (bounded).
inline bool wait_file(const std::string& path, std::chrono::milliseconds limit = std::chrono::seconds(60)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (::access(path.c_str(), F_OK) != 0) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// A free TCP port on loopback (bound then released) for a test's rendezvous endpoint.
inline int free_port() {
  return testnet::unused_port();
}

}  // namespace ddprun::test
