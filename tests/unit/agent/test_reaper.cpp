// The reaper: kills the recorded worker groups when the agent dies, nothing else, and ends with it.
#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>
#include <catch2/catch.hpp>
#include <csignal>

#include "agent_test_util.hpp"
#include "reaper.hpp"

using namespace agent_test;
using ddprun::agent::Reaper;

namespace {

// Live (not zombie) processes in group `pgid`, from /proc.
int live_in_group(pid_t pgid) {
  int n = 0;
  DIR* d = ::opendir("/proc");
  while (const dirent* e = d != nullptr ? ::readdir(d) : nullptr) {
    const std::string stat = read_file(std::string("/proc/") + e->d_name + "/stat");
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    int pgrp = 0;
    if (std::sscanf(stat.c_str() + close + 2, "%c %d %d", &state, &ppid, &pgrp) == 3 && pgrp == pgid &&
        state != 'Z') {
      ++n;
    }
  }
  if (d != nullptr) ::closedir(d);
  return n;
}

bool wait_until(const std::function<bool()>& ok, std::chrono::seconds limit = 10s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!ok()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

// A process group of two sleeping processes (a worker and its child); returns its id once both
// run (the child is forked by the worker: on a loaded machine that comes late).
pid_t start_group() {
  const pid_t p = ::fork();
  if (p == 0) {
    ::setpgid(0, 0);
    ::fork();
    for (;;) ::pause();
  }
  ::setpgid(p, p);
  wait_until([&] { return live_in_group(p) == 2; });
  return p;
}

struct Agent {
  pid_t pid = -1;
  pid_t watched = -1;    // a group the agent recorded with its reaper
  pid_t unwatched = -1;  // a group it did not
  pid_t reaper = -1;
};

// Forks a stand-in agent that starts a reaper and records one of two groups, then waits.
Agent start_agent() {
  int p[2];
  REQUIRE(::pipe(p) == 0);
  Agent a;
  a.pid = ::fork();
  if (a.pid == 0) {
    ::close(p[0]);
    const pid_t ids[3] = {start_group(), start_group(), 0};
    Reaper r;
    r.start();
    r.watch(ids[0]);
    const pid_t out[3] = {ids[0], ids[1], r.pid()};
    [[maybe_unused]] const ssize_t w = ::write(p[1], out, sizeof out);
    for (;;) ::pause();
  }
  ::close(p[1]);
  pid_t in[3] = {};
  REQUIRE(::read(p[0], in, sizeof in) == static_cast<ssize_t>(sizeof in));
  ::close(p[0]);
  a.watched = in[0];
  a.unwatched = in[1];
  a.reaper = in[2];
  return a;
}

}  // namespace

TEST_CASE("reaper: a SIGKILLed agent's recorded groups are killed, and only those") {
  const Agent a = start_agent();
  REQUIRE(a.reaper > 0);
  REQUIRE(live_in_group(a.watched) == 2);
  REQUIRE(live_in_group(a.unwatched) == 2);
  ::kill(a.reaper, SIGTERM);  // what a TERM to the whole step does: the reaper stays for the agent
  ::kill(a.pid, SIGKILL);
  ::waitpid(a.pid, nullptr, 0);
  CHECK(wait_until([&] { return live_in_group(a.watched) == 0; }));
  CHECK(wait_until([&] { return ::kill(a.reaper, 0) != 0 || live_in_group(::getpgid(a.reaper)) == 0; }));
  CHECK(live_in_group(a.unwatched) == 2);
  ::kill(-a.unwatched, SIGKILL);
  ::kill(-a.watched, SIGKILL);  // in case the check above failed
}

TEST_CASE("reaper: after a goodbye it exits and kills nothing") {
  const pid_t g = start_group();
  Reaper r;
  r.start();
  const pid_t rp = r.pid();
  REQUIRE(rp > 0);
  r.watch(g);
  r.disarm();
  CHECK(r.pid() == -1);
  CHECK(::waitpid(rp, nullptr, WNOHANG) < 0);  // already reaped by disarm
  std::this_thread::sleep_for(50ms);
  CHECK(live_in_group(g) == 2);
  ::kill(-g, SIGKILL);
  ::waitpid(g, nullptr, 0);
}
