// `ddprun stacks` against real agents on loopback (docs/observe.md): a Python rank's stack through
// the faulthandler hook and a native rank's through eu-stack, without stopping either (the job then
// ends with exit 0); --rank narrows; a wrong id, a wrong token, a bad selection and a finished job
// are one line.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "e2e/job.hpp"
#include "support/paths.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

const std::string kSecret = "stacks-e2e-secret";

// Two agents x one worker: rank 0 is Python, waiting inside known_function_xyz; rank 1 is native
// (fake_worker, waiting in usleep). Both print "ready", then end with 0 once $DIR/go exists. The
// agents' PYTHONPATH holds a sitecustomize of the user's own.
void start_job(Job& job, const std::string& id) {
  std::ofstream(job.dir / "worker.py")
      << "import os, time\n"
         "def known_function_xyz():\n"
         "    print('ready', flush=True)\n"
         "    while not os.path.exists(os.path.join(os.environ['DIR'], 'go')):\n"
         "        time.sleep(0.05)\n"
         "known_function_xyz()\n";
  // The user's own sitecustomize, which ddprun's shadows on PYTHONPATH, still runs (chained).
  std::filesystem::create_directories(job.dir / "usersite");
  std::ofstream(job.dir / "usersite/sitecustomize.py") << "print('user sitecustomize ran', flush=True)\n";
  job.env["PYTHONPATH"] = job.dir / "usersite";
  job.env["DDPRUN_TOKEN"] = kSecret;
  job.start(2, 1,
            sh("if [ \"$RANK\" = 0 ]; then exec python3 \"$DIR/worker.py\"; else exec " + kFake +
               " print ready wait-file \"$DIR/go\"; fi"),
            {"--rdzv-id", id, "--rdzv-auth", "token"});
}

struct Run {
  int code = -1;
  std::string out, err;
};

Run run_cmd(Job& job, const std::string& sub, const std::vector<std::string>& args,
            const std::string& token = kSecret) {
  static int n = 0;
  std::vector<std::string> argv = {ddprun_test::ddprun_exe(), sub};
  argv.insert(argv.end(), args.begin(), args.end());
  auto p = start(argv, {{"DDPRUN_TOKEN", token}}, job.dir.path(), sub + std::to_string(n++));
  Run r;
  CHECK(wait_for(p, 60s));  // every step is bounded: a hang fails here
  r.code = p.code;
  r.out = p.out();
  r.err = p.err();
  return r;
}

std::vector<std::string> target(const Job& job, const std::string& id) {
  return {"--rdzv-endpoint", "127.0.0.1:" + std::to_string(job.port), "--rdzv-id", id};
}

// Until both ranks printed "ready" (so the Python one is inside known_function_xyz).
void wait_ready(Job& job, const std::string& id) {
  for (int i = 0; i < 240; ++i) {
    auto args = target(job, id);
    args.insert(args.end(), {"--once", "--format", "json"});
    const Run r = run_cmd(job, "top", args);
    if (r.code == 0) {
      const auto j = nlohmann::json::parse(r.out);
      int ready = 0;
      for (const auto& x : j["ranks"]) ready += x["last_line"] == "ready" ? 1 : 0;
      if (ready == 2) return;
    }
    std::this_thread::sleep_for(250ms);
  }
  FAIL("the ranks never printed ready");
}

int line_count(const std::string& s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

}  // namespace

TEST_CASE("ddprun stacks shows a Python rank's function and a native rank's frames without stopping them",
          "[e2e][stacks]") {
  Job job;
  start_job(job, "stacksjob");
  wait_ready(job, "stacksjob");

  auto args = target(job, "stacksjob");
  const Run all = run_cmd(job, "stacks", args);
  INFO(all.out << all.err);
  CHECK(all.code == 0);
  CHECK_THAT(all.out, Catch::Contains("known_function_xyz") && Catch::Contains("nanosleep"));
  CHECK_THAT(all.out, Catch::Contains("rank 0") && Catch::Contains("rank 1"));

  // Asked twice: the Python rank answered the first request and is still there to answer the second.
  args.insert(args.end(), {"--rank", "0", "--format", "json"});
  const Run one = run_cmd(job, "stacks", args);
  INFO(one.out << one.err);
  CHECK(one.code == 0);
  const auto j = nlohmann::json::parse(one.out);
  REQUIRE(j["groups"].size() == 1);
  CHECK(j["groups"][0]["ranks"] == nlohmann::json::array({0}));
  CHECK_THAT(j["groups"][0]["text"].get<std::string>(), Catch::Contains("known_function_xyz"));
  CHECK_THAT(one.out, !Catch::Contains("nanosleep"));

  // Looking stopped nothing: both ranks end as they would have.
  std::ofstream(job.dir / "go").put('\n');
  job.wait_all();
  for (auto& a : job.agents) {
    INFO(a.err());
    CHECK(a.code == 0);
  }
  CHECK_THAT(job.agents[0].out(), Catch::Contains("user sitecustomize ran"));
}

TEST_CASE("ddprun stacks: a wrong id, a wrong token, an unknown rank and a finished job are one line",
          "[e2e][stacks]") {
  Job job;
  start_job(job, "rightid");
  wait_ready(job, "rightid");

  const Run a = run_cmd(job, "stacks", target(job, "wrongid"));
  CHECK(a.code == 1);
  CHECK(a.out.empty());
  CHECK(line_count(a.err) == 1);
  CHECK_THAT(a.err, Catch::Contains("no job with --rdzv-id wrongid"));

  const Run b = run_cmd(job, "stacks", target(job, "rightid"), "not-the-secret");
  CHECK(b.code == 1);
  CHECK(b.out.empty());
  CHECK(line_count(b.err) == 1);
  CHECK_THAT(b.err, Catch::Contains("refused this ddprun's credential"));

  auto bad_rank = target(job, "rightid");
  bad_rank.insert(bad_rank.end(), {"--rank", "7"});
  const Run c = run_cmd(job, "stacks", bad_rank);
  CHECK(c.code == 2);
  CHECK(line_count(c.err) == 1);
  CHECK_THAT(c.err, Catch::Contains("no rank 7"));

  std::ofstream(job.dir / "go").put('\n');
  job.wait_all();
  for (auto& ag : job.agents) CHECK(ag.code == 0);
  const Run d = run_cmd(job, "stacks", target(job, "rightid"));
  CHECK(d.code == 1);
  CHECK(d.out.empty());
  CHECK(line_count(d.err) == 1);
  CHECK_THAT(d.err, Catch::Contains("no ddprun job is answering"));
}

TEST_CASE(
    "hang: a hung Python rank's stack comes through the stacks hook, and it still gets the teardown's "
    "SIGTERM",
    "[e2e][stacks][hang]") {
  // The hang report takes its stacks by the path of `ddprun stacks`: the Python worker dumps and keeps
  // running (no SIGABRT), so its SIGTERM handler (a checkpoint, say) runs in the teardown.
  Job job;
  std::ofstream(job.dir / "hung.py") << "import os, signal, sys, time\n"
                                        "def on_term(signum, frame):\n"
                                        "    open(os.path.join(os.environ['DIR'], 'term'), 'w').close()\n"
                                        "    sys.exit(0)\n"
                                        "signal.signal(signal.SIGTERM, on_term)\n"
                                        "def stuck_here_abc():\n"
                                        "    print('started', flush=True)\n"
                                        "    while True:\n"
                                        "        time.sleep(0.05)\n"
                                        "stuck_here_abc()\n";
  job.start(1, 1, {"python3", job.dir / "hung.py"}, {"--hang-timeout", "2"});
  job.wait_all();
  const std::string err = job.agents[0].err();
  INFO(err);
  CHECK(job.agents[0].code == 124);
  CHECK_THAT(err, Catch::Contains("in stuck_here_abc"));
  CHECK(std::filesystem::exists(job.dir / "term"));
}

// Issue 35 #22: Python started with -I or -E ignores PYTHONFAULTHANDLER (and PYTHONPATH, so the stacks
// hook): SIGABRT only killed the worker, and the report blamed an unset PYTHONFAULTHANDLER.
TEST_CASE(
    "hang: a Python rank run with -I or -E gets its native stack and a line naming the flag, "
    "with -X faulthandler its Python stack",
    "[e2e][stacks][hang]") {
  const std::vector<std::vector<std::string>> flag_sets = {{"-I"}, {"-E"}, {"-I", "-X", "faulthandler"}};
  for (const auto& flags : flag_sets) {
    Job job;
    std::ofstream(job.dir / "hung.py") << "import os, signal, sys, time\n"
                                          "def on_term(signum, frame):\n"
                                          "    open(os.path.join(os.environ['DIR'], 'term'), 'w').close()\n"
                                          "    sys.exit(0)\n"
                                          "signal.signal(signal.SIGTERM, on_term)\n"
                                          "def stuck_here_abc():\n"
                                          "    print('started', flush=True)\n"
                                          "    while True:\n"
                                          "        time.sleep(0.05)\n"
                                          "stuck_here_abc()\n";
    std::vector<std::string> cmd = {"python3"};
    cmd.insert(cmd.end(), flags.begin(), flags.end());
    cmd.push_back(job.dir / "hung.py");
    job.start(1, 1, cmd, {"--hang-timeout", "2"});
    job.wait_all();
    const std::string err = job.agents[0].err();
    INFO(flags.front() << " " << flags.size() << "\n" << err);
    CHECK(job.agents[0].code == 124);
    CHECK_THAT(err, !Catch::Contains("PYTHONFAULTHANDLER unset"));
    if (flags.size() == 1) {
      CHECK_THAT(err, Catch::Contains("this Python runs with " + flags.front() +
                                      ", which ignores PYTHONFAULTHANDLER"));
      CHECK_THAT(err, Catch::Contains("native stack (eu-stack)"));
      CHECK_THAT(err, Catch::Contains("#0 ") || Catch::Contains("eu-stack not installed"));
      CHECK(std::filesystem::exists(job.dir / "term"));  // not aborted: its SIGTERM handler ran
    } else {
      CHECK_THAT(err, Catch::Contains("in stuck_here_abc"));
    }
  }
}

TEST_CASE(
    "ddprun stacks: a node whose ranks ended answers from its exit barrier, and a node that does not answer "
    "is exit 1",
    "[e2e][stacks]") {
  // The usual hang: one node's ranks are done and its agent waits at the exit barrier while a rank
  // elsewhere is stuck. Node 0 done first, then node 1 (whose barrier holds its store connection).
  for (const int done : {0, 1}) {
    CAPTURE(done);
    Job job;
    job.env["DDPRUN_TOKEN"] = kSecret;
    job.start(2, 1,
              sh("echo ready; if [ \"$RANK\" = " + std::to_string(done) + " ]; then exit 0; fi; exec " +
                 kFake + " wait-file \"$DIR/go\""),
              {"--rdzv-id", "barrierjob", "--rdzv-auth", "token"});
    // Until top shows the done rank ended and the other one running.
    bool seen = false;
    for (int i = 0; i < 240 && !seen; ++i) {
      auto args = target(job, "barrierjob");
      args.insert(args.end(), {"--once", "--format", "json"});
      const Run r = run_cmd(job, "top", args);
      if (r.code == 0) {
        const auto j = nlohmann::json::parse(r.out);
        const auto ended = static_cast<std::size_t>(done);
        seen = j["ranks"].size() == 2 && j["ranks"][ended]["state"] == "exited" &&
               j["ranks"][1 - ended]["state"] == "running";
      }
      if (!seen) std::this_thread::sleep_for(250ms);
    }
    REQUIRE(seen);
    const Run all = run_cmd(job, "stacks", target(job, "barrierjob"));
    INFO(all.out << all.err);
    CHECK(all.code == 0);
    CHECK(all.err.empty());
    CHECK_THAT(all.out, Catch::Contains("rank " + std::to_string(done) +
                                        ":\n  (no stack: the worker has ended, exit code 0)") &&
                            Catch::Contains("nanosleep"));
    if (done == 0) {
      // The node whose rank is live stops answering (its agent stopped): the stacks that came are
      // printed, and the command fails naming the silent node.
      ::kill(job.agents[1].pid, SIGSTOP);
      auto args = target(job, "barrierjob");
      args.insert(args.end(), {"--timeout", "2"});
      const Run partial = run_cmd(job, "stacks", args);
      ::kill(job.agents[1].pid, SIGCONT);
      INFO(partial.out << partial.err);
      CHECK(partial.code == 1);
      CHECK_THAT(partial.out, Catch::Contains("(no stack: the worker has ended, exit code 0)"));
      CHECK_THAT(partial.err, Catch::Contains("node ranks 1 did not answer within 2 s"));
      CHECK(line_count(partial.err) == 1);
    }
    std::ofstream(job.dir / "go").put('\n');
    job.wait_all();
  }
}
