// `ddprun top` against real agents on loopback (docs/observe.md): the snapshot lists every rank,
// a silent rank's seconds since progress grow, the job is unaffected; wrong id, wrong token and a
// finished job are one line and exit 1; the live view in a real pseudo-terminal draws, refreshes,
// toggles, quits on q and on Ctrl-C, and leaves the terminal as it found it.
#include <catch2/catch.hpp>

#include <poll.h>
#include <pty.h>
#include <termios.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "e2e/job.hpp"
#include "support/paths.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

const std::string kSecret = "top-e2e-secret";

// Two agents x two workers: each prints a greeting; ranks 0-2 then tick every 0.2 s, rank 3 stays
// silent; all exit 0 once $DIR/go exists.
void start_job(Job& job, const std::string& id) {
  job.env["DDPRUN_TOKEN"] = kSecret;
  job.start(
      2, 2,
      sh("echo \"hello from $RANK\"; if [ \"$RANK\" = 3 ]; then while [ ! -e \"$DIR/go\" ]; do sleep 0.1; "
         "done; else while [ ! -e \"$DIR/go\" ]; do echo \"tick $RANK\"; sleep 0.2; done; fi"),
      {"--rdzv-id", id, "--rdzv-auth", "token"});
}

struct TopRun {
  int code = -1;
  std::string out, err;
};

// `ddprun top` (or `sub`) with DDPRUN_TOKEN set to `token` (unset when empty) and `env` added.
TopRun run_top(Job& job, const std::vector<std::string>& args, const std::string& token = kSecret,
               std::map<std::string, std::string> env = {}, const std::string& sub = "top") {
  static int n = 0;
  std::vector<std::string> argv = {ddprun_test::ddprun_exe(), sub};
  argv.insert(argv.end(), args.begin(), args.end());
  if (!token.empty()) env["DDPRUN_TOKEN"] = token;
  auto p = start(argv, env, job.dir.path(), sub + std::to_string(n++));
  TopRun r;
  CHECK(wait_for(p, 60s));  // every step of top is bounded: a hang fails here
  r.code = p.code;
  r.out = p.out();
  r.err = p.err();
  return r;
}

std::vector<std::string> target(const Job& job, const std::string& id) {
  return {"--rdzv-endpoint", "127.0.0.1:" + std::to_string(job.port), "--rdzv-id", id};
}

// Snapshots until `ok` holds for one (the agents publish about once a second).
nlohmann::json snapshot_until(Job& job, const std::string& id,
                              const std::function<bool(const nlohmann::json&)>& ok,
                              const std::string& token = kSecret,
                              const std::map<std::string, std::string>& env = {}) {
  nlohmann::json last;
  std::string err;
  for (int i = 0; i < 120; ++i) {
    auto args = target(job, id);
    args.insert(args.end(), {"--once", "--format", "json"});
    const TopRun r = run_top(job, args, token, env);
    err = r.err;
    if (r.code == 0) {
      last = nlohmann::json::parse(r.out);
      if (ok(last)) return last;
    }
    std::this_thread::sleep_for(250ms);
  }
  FAIL("no snapshot matched; last: " << last.dump() << " " << err);
  return last;
}

int line_count(const std::string& s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

}  // namespace

TEST_CASE("ddprun top --once --format json lists every rank with pid and last line while the job runs",
          "[e2e][top]") {
  Job job;
  start_job(job, "topjob");
  // Every rank running with its greeting or a tick as its last line.
  const auto snap = snapshot_until(job, "topjob", [](const nlohmann::json& j) {
    if (j["ranks"].size() != 4) return false;
    for (const auto& r : j["ranks"]) {
      if (r["state"] != "running" || r["last_line"].get<std::string>().empty()) return false;
    }
    return true;
  });
  CHECK(snap["job"]["world_size"] == 4);
  CHECK(snap["job"]["nnodes"] == 2);
  CHECK(snap["job"]["attempt"] == 0);
  CHECK(snap["job"]["run_id"] == "topjob");
  for (int rank = 0; rank < 4; ++rank) {
    const auto& r = snap["ranks"][static_cast<std::size_t>(rank)];
    INFO(r.dump());
    CHECK(r["rank"] == rank);
    CHECK(r["local_rank"] == rank % 2);
    CHECK(r["node_rank"] == rank / 2);
    CHECK_FALSE(r["host"].get<std::string>().empty());
    const int pid = r["pid"].get<int>();
    CHECK(pid > 0);
    CHECK(::kill(pid, 0) == 0);  // a live process of this job
    CHECK(r["rss_bytes"].is_number());
    const std::string line = r["last_line"];
    if (rank == 3) {
      CHECK(line == "hello from 3");
    } else {
      CHECK((line == "tick " + std::to_string(rank) || line == "hello from " + std::to_string(rank)));
    }
    for (const char* key : {"seconds_since_progress", "cpu_percent", "step", "restarts", "state"}) {
      CHECK(r.contains(key));
    }
  }
  // The silent rank's seconds since progress grow from one snapshot to a later one.
  const double first = snap["ranks"][3]["seconds_since_progress"];
  const auto later = snapshot_until(job, "topjob", [first](const nlohmann::json& j) {
    return j["ranks"].size() == 4 && j["ranks"][3]["seconds_since_progress"].is_number() &&
           j["ranks"][3]["seconds_since_progress"].get<double>() > first;
  });
  CHECK(later["ranks"][3]["last_line"] == "hello from 3");
  // The text view puts the silent rank first.
  auto args = target(job, "topjob");
  args.push_back("--once");
  const TopRun text = run_top(job, args);
  CHECK(text.code == 0);
  INFO(text.out);
  CHECK_THAT(text.out, Catch::Contains("RANK") && Catch::Contains("hello from 3"));
  const auto header = text.out.find("LAST LINE\n");
  REQUIRE(header != std::string::npos);
  const std::string first_row = text.out.substr(header + 10, text.out.find('\n', header + 10) - header - 10);
  CHECK_THAT(first_row, Catch::StartsWith("    3 "));
  // Looking changed nothing: the job ends as it would have.
  std::ofstream(job.dir / "go").put('\n');
  job.wait_all();
  for (auto& a : job.agents) {
    INFO(a.err());
    CHECK(a.code == 0);
  }
  // Node 0's startup lines named where top reads the job.
  CHECK_THAT(job.agents[0].err(),
             Catch::Contains("ddprun: rendezvous store 127.0.0.1:" + std::to_string(job.port) +
                             ", run id 'topjob': ddprun top and ddprun stacks read the job"));
}

TEST_CASE("ddprun top shows the step a rank wrote to its heartbeat file", "[e2e][top]") {
  Job job;
  job.env["DDPRUN_TOKEN"] = kSecret;
  // Rank 1 reports step 42 (--hang-timeout hands every worker a heartbeat file); rank 0 reports none.
  job.start(2, 1,
            sh("if [ \"$RANK\" = 1 ]; then echo 'step 42' > \"$DDPRUN_HEARTBEAT_FILE\"; fi; "
               "while [ ! -e \"$DIR/go\" ]; do echo \"tick $RANK\"; sleep 0.2; done"),
            {"--rdzv-id", "stepjob", "--rdzv-auth", "token", "--hang-timeout", "120"});
  const auto snap = snapshot_until(job, "stepjob", [](const nlohmann::json& j) {
    return j["ranks"].size() == 2 && j["ranks"][1]["step"].is_number();
  });
  CHECK(snap["ranks"][1]["step"] == 42);
  CHECK(snap["ranks"][0]["step"].is_null());
  std::ofstream(job.dir / "go").put('\n');
  job.wait_all();
  for (auto& a : job.agents) {
    INFO(a.err());
    CHECK(a.code == 0);
  }
}

TEST_CASE("ddprun top: a rank whose output is a progress bar is running, its last line the latest redraw",
          "[e2e][top][bars]") {
  Job job;
  job.env["DDPRUN_TOKEN"] = kSecret;
  // A tqdm-style bar on stderr, redrawn with \r every 0.05 s and no newline until $DIR/go exists.
  job.start(2, 1, {ddprun_test::source_dir() + "/tests/e2e/bar_worker.py", "bar", "go"},
            {"--rdzv-id", "barjob", "--rdzv-auth", "token", "--python", "/usr/bin/python3"});
  const auto redraw = [](const nlohmann::json& j) {
    return j["ranks"].size() == 2 ? j["ranks"][0]["last_line"].get<std::string>() : std::string();
  };
  const auto snap =
      snapshot_until(job, "barjob", [&](const nlohmann::json& j) { return !redraw(j).empty(); });
  CHECK(snap["ranks"][0]["state"] == "running");
  CHECK_THAT(redraw(snap), Catch::Matches(R"(train: +\d+%\|[# ]{10}\| \d+/1000)"));
  // A later snapshot has a later redraw.
  const auto later = snapshot_until(job, "barjob", [&](const nlohmann::json& j) {
    return !redraw(j).empty() && redraw(j) != redraw(snap);
  });
  CHECK_THAT(redraw(later), Catch::StartsWith("train:"));
  std::ofstream(job.dir / "go").put('\n');
  job.wait_all();
  for (auto& a : job.agents) {
    INFO(a.err());
    CHECK(a.code == 0);
  }
}

TEST_CASE("ddprun top: a wrong id, a wrong token and a finished job are one line and exit 1", "[e2e][top]") {
  Job job;
  start_job(job, "rightid");
  snapshot_until(job, "rightid", [](const nlohmann::json& j) { return j["ranks"].size() == 4; });

  auto wrong_id = target(job, "wrongid");
  wrong_id.push_back("--once");
  const TopRun a = run_top(job, wrong_id);
  CHECK(a.code == 1);
  CHECK(a.out.empty());
  CHECK(line_count(a.err) == 1);
  CHECK_THAT(a.err, Catch::Contains("no job with --rdzv-id wrongid") &&
                        Catch::Contains("the store there serves another run ('rightid')"));

  auto right = target(job, "rightid");
  right.push_back("--once");
  const TopRun b = run_top(job, right, "not-the-secret");
  CHECK(b.code == 1);
  CHECK(b.out.empty());
  CHECK(line_count(b.err) == 1);
  CHECK_THAT(b.err, Catch::Contains("refused this ddprun's credential"));

  std::ofstream(job.dir / "go").put('\n');
  job.wait_all();
  for (auto& a2 : job.agents) CHECK(a2.code == 0);
  const TopRun c = run_top(job, right);
  CHECK(c.code == 1);
  CHECK(c.out.empty());
  CHECK(line_count(c.err) == 1);
  CHECK_THAT(c.err, Catch::Contains("no ddprun job is answering") && Catch::Contains("finished"));
}

namespace {

// `ddprun top` in a fresh pseudo-terminal; `keys` are typed once the view has drawn twice, and
// after a 'n' once the per-node view is drawn. Returns the exit code and what the terminal showed;
// `sane` says whether the terminal's settings afterwards equal those before.
struct PtyRun {
  int code = -1;
  std::string screen;
  bool sane = false;
};

PtyRun run_top_in_pty(Job& job, const std::string& id, const std::string& keys,
                      const std::function<void()>& once_drawn = {}) {
  PtyRun res;
  int master = -1, slave = -1;
  winsize ws{};
  ws.ws_col = 160;
  ws.ws_row = 40;
  REQUIRE(::openpty(&master, &slave, nullptr, nullptr, &ws) == 0);
  termios before{};
  REQUIRE(::tcgetattr(slave, &before) == 0);
  std::vector<std::string> argv = {ddprun_test::ddprun_exe(), "top"};
  for (const auto& a : target(job, id)) argv.push_back(a);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::setsid();
    ::ioctl(slave, TIOCSCTTY, 0);
    ::dup2(slave, 0);
    ::dup2(slave, 1);
    ::dup2(slave, 2);
    ::close(master);
    ::setenv("DDPRUN_TOKEN", kSecret.c_str(), 1);
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    ::execv(cargv[0], cargv.data());
    ::_exit(127);
  }
  const auto read_until = [&](const std::function<bool()>& done) {
    const auto end = std::chrono::steady_clock::now() + 60s;
    while (!done() && std::chrono::steady_clock::now() < end) {
      pollfd p{master, POLLIN, 0};
      if (::poll(&p, 1, 100) > 0) {
        char buf[4096];
        const ssize_t n = ::read(master, buf, sizeof buf);
        if (n <= 0) break;
        res.screen.append(buf, static_cast<std::size_t>(n));
      }
    }
    return done();
  };
  const auto frames = [&res] {
    std::size_t n = 0, at = 0;
    while ((at = res.screen.find("ddprun top  ", at)) != std::string::npos) {
      ++n;
      ++at;
    }
    return n;
  };
  CHECK(read_until([&] { return frames() >= 2 && res.screen.find("hello from 3") != std::string::npos; }));
  if (once_drawn) once_drawn();
  for (char k : keys) {
    if (k == 'n') {
      REQUIRE(::write(master, "n", 1) == 1);
      CHECK(read_until([&] { return res.screen.find("AGENT") != std::string::npos; }));
      continue;
    }
    REQUIRE(::write(master, &k, 1) == 1);
  }
  // Reads until the child is gone (a hang would fail the wait below).
  int status = 0;
  const auto end = std::chrono::steady_clock::now() + 30s;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > end) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    pollfd p{master, POLLIN, 0};
    if (::poll(&p, 1, 50) > 0) {
      char buf[4096];
      const ssize_t n = ::read(master, buf, sizeof buf);
      if (n > 0) res.screen.append(buf, static_cast<std::size_t>(n));
    }
  }
  // What it wrote just before it exited may still wait in the pty: drain it (the test keeps the slave
  // open, so the master reads no end of file).
  for (;;) {
    pollfd p{master, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) break;
    char buf[4096];
    const ssize_t n = ::read(master, buf, sizeof buf);
    if (n <= 0) break;
    res.screen.append(buf, static_cast<std::size_t>(n));
  }
  res.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  termios after{};
  REQUIRE(::tcgetattr(slave, &after) == 0);
  res.sane = before.c_iflag == after.c_iflag && before.c_oflag == after.c_oflag &&
             before.c_lflag == after.c_lflag && before.c_cflag == after.c_cflag &&
             std::equal(std::begin(before.c_cc), std::end(before.c_cc), std::begin(after.c_cc));
  ::close(master);
  ::close(slave);
  return res;
}

}  // namespace

TEST_CASE(
    "ddprun top's live view draws, refreshes, toggles per node, and quits on q and on Ctrl-C leaving "
    "the terminal sane",
    "[e2e][top]") {
  Job job;
  start_job(job, "livejob");
  snapshot_until(job, "livejob", [](const nlohmann::json& j) { return j["ranks"].size() == 4; });
  for (const std::string& keys : {std::string("nq"), std::string("\x03")}) {
    CAPTURE(keys);
    const PtyRun r = run_top_in_pty(job, "livejob", keys);
    INFO(r.screen.substr(r.screen.size() > 2000 ? r.screen.size() - 2000 : 0));
    CHECK(r.code == 0);
    CHECK(r.sane);
    CHECK_THAT(r.screen, Catch::StartsWith("\x1b[?1049h") && Catch::EndsWith("\x1b[?25h\x1b[?1049l"));
  }
  std::ofstream(job.dir / "go").put('\n');
  job.wait_all();
  for (auto& a : job.agents) CHECK(a.code == 0);
}

TEST_CASE("ddprun top's live view says the job finished when it ends under it, exit 0, the terminal sane",
          "[e2e][top]") {
  Job job;
  start_job(job, "endjob");
  snapshot_until(job, "endjob", [](const nlohmann::json& j) { return j["ranks"].size() == 4; });
  // The job ends while the view is up: node 0's store closes after saying so.
  const PtyRun r = run_top_in_pty(job, "endjob", "", [&job] { std::ofstream(job.dir / "go").put('\n'); });
  INFO(r.screen.substr(r.screen.size() > 2000 ? r.screen.size() - 2000 : 0));
  CHECK(r.code == 0);
  CHECK(r.sane);
  CHECK_THAT(r.screen, Catch::Contains("\x1b[?25h\x1b[?1049l") &&
                           Catch::EndsWith("ddprun top: the job at 127.0.0.1:" + std::to_string(job.port) +
                                           " (--rdzv-id endjob) has finished\r\n"));
  CHECK_THAT(r.screen, !Catch::Contains("stopped answering") && !Catch::Contains("error"));
  job.wait_all();
  for (auto& a : job.agents) CHECK(a.code == 0);
}

TEST_CASE("ddprun top and stacks read the token file from DDPRUN_TOKEN_FILE, as the agents do",
          "[e2e][top]") {
  Job job;
  const std::string file = job.dir / "token";
  std::ofstream(file) << kSecret;
  std::filesystem::permissions(file, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write,
                               std::filesystem::perm_options::replace);
  // The agents take the secret from the file; so must top and stacks, with no DDPRUN_TOKEN in sight.
  job.env["DDPRUN_TOKEN_FILE"] = file;
  job.start(2, 1, sh("echo \"hello from $RANK\"; while [ ! -e \"$DIR/go\" ]; do sleep 0.1; done"),
            {"--rdzv-id", "filejob", "--rdzv-auth", "token"});
  const std::map<std::string, std::string> env = {{"DDPRUN_TOKEN_FILE", file}};
  const auto snap = snapshot_until(
      job, "filejob", [](const nlohmann::json& j) { return j["ranks"].size() == 2; }, "", env);
  CHECK(snap["job"]["run_id"] == "filejob");
  const TopRun stacks = run_top(job, target(job, "filejob"), "", env, "stacks");
  INFO(stacks.err);
  CHECK(stacks.code == 0);
  CHECK_THAT(stacks.out, Catch::Contains("TID"));  // both ranks' stacks, no node missing
  CHECK(stacks.err.empty());
  std::ofstream(job.dir / "go").put('\n');
  job.wait_all();
  for (auto& a : job.agents) CHECK(a.code == 0);
}

TEST_CASE(
    "ddprun top and stacks find the store where node 0's failover moved it, and the survivors say where",
    "[e2e][top][elastic]") {
  // Three agents of an elastic job on one host: node 0 is SIGKILLed, the first survivor serves a fresh
  // store one port up and the job goes on at world size 2.
  Job job;
  job.env["DDPRUN_TOKEN"] = kSecret;
  job.start(
      3, 1,
      sh("echo \"attempt $TORCHELASTIC_RESTART_COUNT rank $RANK\"; while [ ! -e \"$DIR/go\" ]; do sleep "
         "0.1; done"),
      {"--rdzv-id", "movejob", "--rdzv-auth", "token", "--nnodes", "2:3", "--max-restarts", "1"});
  snapshot_until(job, "movejob", [](const nlohmann::json& j) { return j["ranks"].size() == 3; });
  ::kill(job.agents[0].pid, SIGKILL);
  // The view from where the job started: the new store, attempt 1, two ranks.
  const auto moved = snapshot_until(job, "movejob", [](const nlohmann::json& j) {
    return j["job"]["attempt"] == 1 && j["ranks"].size() == 2 && j["ranks"][1]["state"] == "running";
  });
  CHECK(moved["job"]["world_size"] == 2);
  CHECK(moved["job"]["endpoint"] != "127.0.0.1:" + std::to_string(job.port));
  const TopRun stacks = run_top(job, target(job, "movejob"), kSecret, {}, "stacks");
  INFO(stacks.out << stacks.err);
  CHECK(stacks.code == 0);
  CHECK_THAT(stacks.out, Catch::Contains("TID"));  // both ranks' stacks, no node missing
  CHECK(stacks.err.empty());
  std::ofstream(job.dir / "go").put('\n');
  for (std::size_t n : {1u, 2u}) {
    REQUIRE(wait_for(job.agents[n], 120s));
    INFO(job.agents[n].err());
    CHECK(job.agents[n].code == 0);
    CHECK_THAT(job.agents[n].err(), Catch::Contains("node 0 was lost: the rendezvous store moved to ") &&
                                        Catch::Contains(":" + std::to_string(job.port + 1) + " "));
  }
}
