// The reaper: kills the recorded worker groups when the agent dies, nothing else, and ends with it.
#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>
#include <catch2/catch.hpp>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>

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

// Forks a stand-in agent that starts a reaper and records one of two groups (and whatever `more`
// records), then waits.
Agent start_agent(const std::function<void(Reaper&)>& more = {}) {
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
    if (more) more(r);
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

TEST_CASE("reaper: records on the agent's socket, and only ddprun's own directories") {
  using ddprun::agent::parse_reaper_record;
  using Kind = ddprun::agent::ReaperRecord::Kind;
  const auto g = parse_reaper_record(ddprun::agent::reaper_group_record(4242));
  CHECK(g.kind == Kind::group);
  CHECK(g.group == 4242);
  CHECK(parse_reaper_record(ddprun::agent::reaper_goodbye_record()).kind == Kind::goodbye);
  const std::string dir_record = ddprun::agent::reaper_dir_record("/tmp/ddprun-errors-a1B2c3");
  const auto d = parse_reaper_record(dir_record);  // its dir points into the record
  CHECK(d.kind == Kind::dir);
  CHECK(d.dir == "/tmp/ddprun-errors-a1B2c3");
  struct Row {
    std::string message;
    Kind kind;
  };
  const std::vector<Row> rows = {
      {"", Kind::invalid},
      {"x", Kind::invalid},
      {"b!", Kind::invalid},
      {ddprun::agent::reaper_group_record(1), Kind::invalid},   // never init
      {ddprun::agent::reaper_group_record(0), Kind::invalid},   // never the agent's own group
      {ddprun::agent::reaper_group_record(-1), Kind::invalid},  // never every process
      {"g12", Kind::invalid},                                   // short
      {"d/", Kind::invalid},
      {"drelative/ddprun-errors-x", Kind::invalid},
      {"d/tmp", Kind::invalid},
      {"d/tmp/ddprun-", Kind::invalid},
      {"d/tmp/other-dir", Kind::invalid},
      {"d/tmp/ddprun-x/", Kind::invalid},
      {"d/tmp/../etc/ddprun-x", Kind::invalid},
      {"d/tmp/./ddprun-x", Kind::invalid},
      {"d//ddprun-x", Kind::invalid},
      {"d/tmp/ddprun-x/..", Kind::invalid},
      {std::string("d/tmp/ddprun-x\0y", 16), Kind::invalid},
      {"d/scratch/user/ddprun-heartbeat-Ab12Cd", Kind::dir},
  };
  for (const auto& r : rows) {
    INFO(r.message);
    CHECK(parse_reaper_record(r.message).kind == r.kind);
  }
}

namespace {

std::string cmdline_of(pid_t pid) {
  return read_file("/proc/" + std::to_string(pid) + "/cmdline");
}

}  // namespace

TEST_CASE("reaper: its command line is its own, never the agent's") {
  Reaper r;
  r.start();
  REQUIRE(r.pid() > 0);
  // The fork execs itself as ddprun-reaper: until then it shows this program's command line.
  const bool own = wait_until([&] { return cmdline_of(r.pid()) == std::string("ddprun-reaper") + '\0'; });
  INFO(cmdline_of(r.pid()));
  CHECK(own);
  // Its name in ps and top, set as it starts.
  CHECK(wait_until(
      [&] { return read_file("/proc/" + std::to_string(r.pid()) + "/comm") == "ddprun-reaper\n"; }));
  r.disarm();
}

TEST_CASE("reaper: a SIGKILLed agent's private directories are removed, after a goodbye they stay") {
  TempDir tmp;
  const std::string dir = tmp / "ddprun-errors-Ab12Cd";
  const std::string other = tmp / "not-ddprun";
  std::filesystem::create_directories(dir + "/sub");
  std::filesystem::create_directories(other);
  std::ofstream(dir + "/sub/rank_0.json") << "{}";
  {
    const Agent a = start_agent([&](Reaper& r) {
      r.remove_on_death(dir);
      r.remove_on_death(other);  // refused: not one of ddprun's directories
    });
    ::kill(a.pid, SIGKILL);
    ::waitpid(a.pid, nullptr, 0);
    CHECK(wait_until([&] { return !std::filesystem::exists(dir); }));
    CHECK(std::filesystem::exists(other));
    ::kill(-a.unwatched, SIGKILL);
    ::kill(-a.watched, SIGKILL);
  }
  std::filesystem::create_directories(dir);
  Reaper r;
  r.start();
  r.remove_on_death(dir);
  r.disarm();
  CHECK(std::filesystem::exists(dir));
}
