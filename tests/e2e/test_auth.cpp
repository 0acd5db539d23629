// Authenticated rendezvous with real agents: shared token, wrong token, and an unauthenticated
// raw client knocking while a rendezvous completes.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "e2e/procs.hpp"
#include "support/paths.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

struct AuthJob {
  TempDir dir;
  std::string tag = "ddprun-e2e-auth-" + std::to_string(::getpid()) + "-" + std::to_string(free_port());
  int port = free_port();
  std::vector<Proc> agents;

  // One agent of a 2-node job; `token` empty = no DDPRUN_TOKEN.
  void start_agent(int rank, const std::string& token, const std::string& script,
                   const std::string& timeout = "60") {
    std::vector<std::string> argv = {ddprun_test::ddprun_exe(),
                                     "--nnodes",
                                     "2",
                                     "--node-rank",
                                     std::to_string(rank),
                                     "--rdzv-endpoint",
                                     "127.0.0.1:" + std::to_string(port),
                                     "--rdzv-id",
                                     "e2e-auth",
                                     "--rdzv-auth",
                                     "token",
                                     "--rdzv-timeout",
                                     timeout,
                                     "--term-timeout",
                                     "3",
                                     "--",
                                     "/bin/sh",
                                     "-c",
                                     script};
    std::map<std::string, std::string> env = {{"DDPRUN_TEST_TOKEN", tag}};
    if (!token.empty()) env["DDPRUN_TOKEN"] = token;
    agents.push_back(start(argv, env, dir.path(), "agent" + std::to_string(rank)));
  }
  ~AuthJob() {
    for (auto& a : agents) wait_for(a, 1ms);
    leftovers_after(tag, 1ms);
  }
};

int connect_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void put32(std::string& s, std::uint32_t v) {
  for (int sh = 24; sh >= 0; sh -= 8) s.push_back(static_cast<char>((v >> sh) & 0xff));
}

// A well-formed version-2 hello with no credential (docs/protocol.md), then a set request.
std::string raw_hello(const std::string& run_id, const std::string& label) {
  std::string p;
  put32(p, 0x44524456);
  p += std::string("\0\2\0\0", 4);  // version 2, flags 0
  put32(p, 0);                      // liveness
  put32(p, static_cast<std::uint32_t>(run_id.size()));
  p += run_id;
  put32(p, static_cast<std::uint32_t>(label.size()));
  p += label;
  p.push_back('\0');  // auth: none
  put32(p, 0);        // empty credential
  std::string f;
  put32(f, static_cast<std::uint32_t>(p.size()));
  return f + p;
}

// True when the server closes the connection within `limit`.
bool closed_within(int fd, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  char buf[1024];
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("agents sharing DDPRUN_TOKEN meet, and workers do not inherit the token", "[e2e][auth]") {
  AuthJob job;
  // Exit 0 only when the worker's environment holds no DDPRUN_TOKEN.
  const std::string script = "test -z \"$DDPRUN_TOKEN\"";
  job.start_agent(0, "same-secret-1", script);
  job.start_agent(1, "same-secret-1", script);
  for (auto& a : job.agents) {
    CHECK(wait_for(a, 120s));
    INFO(a.err());
    CHECK(a.code == 0);
  }
  CHECK_FALSE(job.agents[0].err().find("rejected peer") != std::string::npos);
  CHECK(leftovers_after(job.tag, 5s).empty());
}

TEST_CASE("agents reading the token through a symbolic link meet", "[e2e][auth]") {
  AuthJob job;
  const std::string file = job.dir / "token";
  { std::ofstream(file) << "linked-secret\n"; }
  ::chmod(file.c_str(), 0600);
  // ~/.ddprun-token -> the real file, as a shared home or a secrets mount arranges it.
  std::filesystem::create_symlink(file, job.dir / "token-link");
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<std::string> argv = {ddprun_test::ddprun_exe(),
                                     "--nnodes",
                                     "2",
                                     "--node-rank",
                                     std::to_string(rank),
                                     "--rdzv-endpoint",
                                     "127.0.0.1:" + std::to_string(job.port),
                                     "--rdzv-auth",
                                     "token",
                                     "--rdzv-token-file",
                                     job.dir / "token-link",
                                     "--rdzv-timeout",
                                     "60",
                                     "--",
                                     "true"};
    job.agents.push_back(start(argv, {{"DDPRUN_TEST_TOKEN", job.tag}, {"DDPRUN_TOKEN", ""}}, job.dir.path(),
                               "linked" + std::to_string(rank)));
  }
  for (auto& a : job.agents) {
    CHECK(wait_for(a, 120s));
    INFO(a.err());
    CHECK(a.code == 0);
  }
  CHECK(leftovers_after(job.tag, 5s).empty());
}

TEST_CASE("an agent with another token is refused and the master names it", "[e2e][auth]") {
  AuthJob job;
  // 12 s: one "waiting" line (every 10 s) before the timeout's.
  job.start_agent(0, "right-secret", "true", "12");
  job.start_agent(1, "wrong-secret", "true", "12");
  CHECK(wait_for(job.agents[1], 120s));
  CHECK(wait_for(job.agents[0], 120s));
  INFO(job.agents[1].err());
  INFO(job.agents[0].err());
  CHECK(job.agents[1].code != 0);
  CHECK_THAT(job.agents[1].err(), Catch::Contains("refused this agent") && Catch::Contains("wrong token"));
  CHECK(job.agents[0].code != 0);  // node 1 never joined
  CHECK_THAT(job.agents[0].err(),
             Catch::Contains("rejected peer 127.0.0.1:") && Catch::Contains("wrong token"));
  // One refused agent is one line in the master's log, not one per connection attempt.
  const std::string master_err = job.agents[0].err();
  std::size_t lines = 0;
  for (auto at = master_err.find("rejected peer"); at != std::string::npos;
       at = master_err.find("rejected peer", at + 1)) {
    ++lines;
  }
  CHECK(lines == 1);
  // Node 0's waiting line and its last line say who was refused and why, not only that node 1 never came.
  const auto line_with = [&](const std::string& what) {
    const auto at = master_err.find(what);
    if (at == std::string::npos) return std::string();
    const auto begin = master_err.rfind('\n', at);
    return master_err.substr(begin == std::string::npos ? 0 : begin + 1,
                             master_err.find('\n', at) - (begin == std::string::npos ? 0 : begin + 1));
  };
  const std::string refused =
      "this store refused 1 connection from 127.0.0.1 as node rank 1: authentication failed: wrong token";
  CHECK_THAT(line_with(" waiting 10 s: "),
             Catch::StartsWith("ddprun: rendezvous 127.0.0.1:") &&
                 Catch::EndsWith("1 of 2 node(s) joined; missing: node rank 1; " + refused +
                                 " (DDPRUN_TOKEN / token file differs from node 0's)"));
  CHECK_THAT(line_with(" timed out after "),
             Catch::Contains(
                 "timed out after 12.0 s: 1 of 2 node(s) joined; never arrived: node rank 1. Meanwhile " +
                 refused) &&
                 Catch::EndsWith("(--rdzv-timeout)"));
  CHECK_THAT(master_err, !Catch::Contains("Check that ddprun started"));
  CHECK(leftovers_after(job.tag, 5s).empty());
}

TEST_CASE("an unauthenticated raw client is dropped while the rendezvous completes", "[e2e][auth]") {
  AuthJob job;
  job.start_agent(0, "secret-3", "true");
  int fd = -1;
  const auto end = std::chrono::steady_clock::now() + 60s;
  while (fd < 0 && std::chrono::steady_clock::now() < end) {
    fd = connect_loopback(job.port);
    if (fd < 0) std::this_thread::sleep_for(20ms);
  }
  REQUIRE(fd >= 0);
  const std::string hello = raw_hello("e2e-auth", "raw-intruder");
  CHECK(::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(hello.size()));
  CHECK(closed_within(fd, 30s));
  ::close(fd);
  job.start_agent(1, "secret-3", "true");
  for (auto& a : job.agents) {
    CHECK(wait_for(a, 120s));
    INFO(a.err());
    CHECK(a.code == 0);
  }
  CHECK_THAT(job.agents[0].err(), Catch::Contains("rejected peer") && Catch::Contains("'raw-intruder'") &&
                                      Catch::Contains("authentication required"));
  CHECK(leftovers_after(job.tag, 5s).empty());
}

TEST_CASE("bad authentication setup stops the agent with one line and exit code 2", "[e2e][auth]") {
  AuthJob job;
  const std::string file = job.dir / "token";
  { std::ofstream(file) << "secret\n"; }
  ::chmod(file.c_str(), 0644);
  auto run = [&](std::vector<std::string> extra, std::map<std::string, std::string> env,
                 const std::string& name) {
    std::vector<std::string> argv = {ddprun_test::ddprun_exe(),
                                     "--nnodes",
                                     "2",
                                     "--node-rank",
                                     "1",
                                     "--rdzv-endpoint",
                                     "127.0.0.1:" + std::to_string(job.port),
                                     "--rdzv-timeout",
                                     "5"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.insert(argv.end(), {"--", "true"});
    env["DDPRUN_TEST_TOKEN"] = job.tag;
    if (!env.count("DDPRUN_TOKEN")) env["DDPRUN_TOKEN"] = "";  // the runner's own token must not win
    job.agents.push_back(start(argv, env, job.dir.path(), name));
    CHECK(wait_for(job.agents.back(), 60s));
    return job.agents.back();
  };
  Proc open = run({"--rdzv-token-file", file}, {}, "open");
  CHECK(open.code == 2);
  CHECK_THAT(open.err(), Catch::Contains("mode 0644") && Catch::Contains("chmod 600"));
  Proc viaenv = run({}, {{"DDPRUN_TOKEN_FILE", file}}, "viaenv");
  CHECK(viaenv.code == 2);
  CHECK_THAT(viaenv.err(), Catch::Contains("chmod 600"));
  Proc bogus = run({"--rdzv-auth", "maybe"}, {}, "bogus");
  CHECK(bogus.code == 2);
  CHECK_THAT(bogus.err(), Catch::Contains("--rdzv-auth: maybe not in {auto,munge,token,none}"));
  Proc notoken = run({"--rdzv-auth", "token"}, {}, "notoken");
  CHECK(notoken.code == 2);
  CHECK_THAT(notoken.err(), Catch::Contains("no token given"));
  CHECK(leftovers_after(job.tag, 5s).empty());
}

// Two agents with --rdzv-auth auto, where neither munged nor a token is there; `extra` before the command.
void start_open_job(AuthJob& job, const std::vector<std::string>& extra) {
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<std::string> argv = {ddprun_test::ddprun_exe(),
                                     "--nnodes",
                                     "2",
                                     "--node-rank",
                                     std::to_string(rank),
                                     "--rdzv-endpoint",
                                     "127.0.0.1:" + std::to_string(job.port),
                                     "--rdzv-timeout",
                                     "60"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.insert(argv.end(), {"--", "true"});
    // A munged socket that does not exist makes "no MUNGE here" certain on any machine.
    job.agents.push_back(start(argv,
                               {{"DDPRUN_TEST_TOKEN", job.tag},
                                {"DDPRUN_TOKEN", ""},
                                {"DDPRUN_TOKEN_FILE", ""},
                                {"DDPRUN_RDZV_AUTH", "auto"},
                                {"DDPRUN_MUNGE_SOCKET", job.dir / "no-munge.sock"}},
                               job.dir.path(), "agent" + std::to_string(rank)));
  }
  for (auto& a : job.agents) {
    CHECK(wait_for(a, 120s));
    INFO(a.err());
    CHECK(a.code == 0);
  }
}

TEST_CASE("auto without MUNGE or token warns on the master that the store is open", "[e2e][auth]") {
  AuthJob job;
  start_open_job(job, {});
  CHECK_THAT(job.agents[0].err(), Catch::Contains("warning: the rendezvous store is unauthenticated"));
  CHECK_THAT(job.agents[1].err(), !Catch::Contains("unauthenticated"));
  CHECK(leftovers_after(job.tag, 5s).empty());
}

TEST_CASE("a quiet job that succeeds prints nothing on any node, the open-store warning included",
          "[e2e][auth]") {
  AuthJob job;
  start_open_job(job, {"-q"});
  for (const auto& a : job.agents) CHECK(a.err().empty());
  CHECK(leftovers_after(job.tag, 5s).empty());
}

TEST_CASE("single-node runs open no store: the token never reaches a worker, auth settings are not checked",
          "[e2e][auth]") {
  AuthJob job;
  const std::string file = job.dir / "token";
  { std::ofstream(file) << "secret\n"; }
  ::chmod(file.c_str(), 0644);
  auto run = [&](std::vector<std::string> extra, std::map<std::string, std::string> env,
                 const std::string& script, const std::string& name) {
    std::vector<std::string> argv = {ddprun_test::ddprun_exe(), "--nproc-per-node", "2"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.insert(argv.end(), {"--", "/bin/sh", "-c", script});
    env["DDPRUN_TEST_TOKEN"] = job.tag;
    if (!env.count("DDPRUN_TOKEN")) env["DDPRUN_TOKEN"] = "";
    job.agents.push_back(start(argv, env, job.dir.path(), name));
    CHECK(wait_for(job.agents.back(), 60s));
    return job.agents.back();
  };
  // Exit 0 only when the worker's environment holds no DDPRUN_TOKEN.
  Proc clean = run({}, {{"DDPRUN_TOKEN", "s3cret-single-node"}}, "test -z \"$DDPRUN_TOKEN\"", "clean");
  INFO(clean.err());
  CHECK(clean.code == 0);
  Proc standalone = run({"--standalone"}, {{"DDPRUN_TOKEN", "s3cret-standalone"}},
                        "test -z \"$DDPRUN_TOKEN\"", "standalone");
  CHECK(standalone.code == 0);
  // Settings only a store needs (a site-wide DDPRUN_RDZV_AUTH=token, say) do not stop a one-node run,
  // with --standalone or without.
  for (const bool given : {false, true}) {
    CAPTURE(given);
    const std::string tag = given ? "-standalone" : "";
    auto with = [&](std::vector<std::string> more) {
      if (given) more.insert(more.begin(), "--standalone");
      return more;
    };
    Proc open = run(with({"--rdzv-token-file", file}), {}, "true", "open" + tag);
    CHECK(open.code == 0);
    Proc notoken = run(with({"--rdzv-auth", "token"}), {}, "true", "notoken" + tag);
    INFO(notoken.err());
    CHECK(notoken.code == 0);
    CHECK_THAT(notoken.err(), !Catch::Contains("token"));
    Proc nomunge = run(with({"--rdzv-auth", "munge"}), {{"DDPRUN_MUNGE_SOCKET", job.dir / "no-munge.sock"}},
                       "true", "nomunge" + tag);
    CHECK(nomunge.code == 0);
  }
  CHECK(leftovers_after(job.tag, 5s).empty());
}
