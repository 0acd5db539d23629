// Real Python training scripts as users write them: torch.distributed.launch's --local_rank, and
// torchrun's @record, whose exception and traceback reach every node's failure report.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "e2e/job.hpp"
#include "support/paths.hpp"
#include "support/torch_python.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

std::string script(const std::string& name) {
  return ddprun_test::source_dir() + "/tests/e2e/" + name;
}

// What is left in `tmp` of ddprun's private error-file directories.
int error_dirs_in(const std::string& tmp) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(tmp)) {
    n += e.path().filename().string().rfind("ddprun-errors-", 0) == 0 ? 1 : 0;
  }
  return n;
}

}  // namespace

TEST_CASE("local-rank-arg: a torch.distributed.launch script parses its own local rank", "[e2e][python]") {
  const std::string python = torch_python();
  Job job;
  job.start(1, 2, {script("local_rank_arg.py"), "--lr", "0.5"},
            {"--python", python, "--use_env", "--local-rank-arg", "underscore"});
  job.wait_all();
  REQUIRE(job.agents.size() == 1);
  INFO(job.agents[0].err());
  CHECK(job.agents[0].code == 0);
  for (int r = 0; r < 2; ++r) {
    std::istringstream in(read_file(job.dir / ("parsed_" + std::to_string(r) + ".txt")));
    int parsed = -1, env_local = -1;
    double lr = 0;
    in >> parsed >> env_local >> lr;
    CHECK(parsed == r);  // without the flag every rank would parse the default, 0
    CHECK(env_local == r);
    CHECK(lr == 0.5);  // the user's own arguments still come after
  }
}

// torch.distributed.launch of the torch under test (1.13: --local_rank=N, 2.x: --local-rank=N) against
// ddprun with the matching --local-rank-arg: the worker gets the same arguments, and every variable that
// launch sets, with the same value unless it differs by design.
TEST_CASE(
    "torch.distributed.launch and ddprun --local-rank-arg give a worker the same arguments and variables",
    "[e2e][python][torch][torch2]") {
  const std::string python = torch_python();
  Job job;
  auto launch = start({python, "-m", "torch.distributed.launch", "--nproc_per_node", "2", "--master_port",
                       std::to_string(free_port()), "-r", "1", "-t", "1",  // -r/-t: 1.13 fails without them
                       script("launch_env.py"), "--lr", "0.5"},
                      {{"DIR", job.dir.str()}, {"LAUNCHER", "torch"}, {"DDPRUN_TEST_TOKEN", job.token}},
                      job.dir.str(), "launch");
  REQUIRE(wait_for(launch, 240s));
  INFO("torch.distributed.launch: " << launch.err());
  REQUIRE(launch.code == 0);
  const std::string local_arg = nlohmann::json::parse(read_file(job.dir / "torch.1.json")).at("argv").at(0);
  const bool underscore = local_arg.starts_with("--local_rank=");
  REQUIRE((underscore || local_arg.starts_with("--local-rank=")));
  job.env["LAUNCHER"] = "ddprun";
  job.start(1, 2, {script("launch_env.py"), "--lr", "0.5"},
            {"--python", python, "--local-rank-arg", underscore ? "underscore" : "dash"});
  job.wait_all(240s);
  INFO("ddprun: " << job.agents[0].err());
  REQUIRE(job.agents[0].code == 0);
  // Not the launcher's: the test's own variables, and torchrun 2.x's TORCHELASTIC_SIGNALS_TO_HANDLE, its
  // agent's own setting that its workers inherit.
  const std::set<std::string> skip = {"DIR", "LAUNCHER", "DDPRUN_TEST_TOKEN",
                                      "TORCHELASTIC_SIGNALS_TO_HANDLE"};
  // Set by both, with values that differ by design: ddprun's own store, run id and error-file paths; no
  // agent store for the workers.
  const std::set<std::string> own = {"MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
                                     "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_USE_AGENT_STORE"};
  for (int r = 0; r < 2; ++r) {
    const auto name = std::to_string(r) + ".json";
    const auto torch = nlohmann::json::parse(read_file(job.dir / ("torch." + name)));
    const auto ours = nlohmann::json::parse(read_file(job.dir / ("ddprun." + name)));
    CAPTURE(r);
    CHECK(ours.at("argv") == torch.at("argv"));
    CHECK(ours.at("parsed_local_rank") == r);
    int compared = 0;
    for (const auto& [k, v] : torch.at("env").items()) {
      const char* before = std::getenv(k.c_str());
      if ((before != nullptr && v == before) || skip.contains(k)) continue;  // not set by the launcher
      CAPTURE(k);
      REQUIRE(ours.at("env").contains(k));
      if (!own.contains(k)) {
        CHECK(ours.at("env").at(k) == v);
        ++compared;
      }
    }
    CHECK(compared >= 10);  // RANK, LOCAL_RANK, WORLD_SIZE, ...: the launcher's variables were found
  }
  CHECK(leftovers_after(job.token, 10s).empty());
}

TEST_CASE("@record: the exception and its traceback reach every node's report and error file",
          "[e2e][python][torch][torch2]") {
  const std::string python = torch_python();
  for (const bool verbose : {false, true}) {
    CAPTURE(verbose);
    Job job;
    std::filesystem::create_directories(job.dir / "tmp");
    job.env["TMPDIR"] = job.dir / "tmp";
    std::vector<std::string> extra = {"--python", python, "--error-file", job.dir / "err.json"};
    if (verbose) {
      extra.push_back("--verbose");
      extra.push_back("--log-dir");
      extra.push_back(job.dir / "logs");
    }
    job.start(2, 1, {script("record_worker.py")}, extra);  // rank 1 (node 1) raises
    job.wait_all(240s);
    for (int n = 0; n < 2; ++n) {
      const auto& a = job.agents[static_cast<std::size_t>(n)];
      INFO("node " << n << " stderr:\n" << a.err());
      CHECK(a.code == 1);  // the failed worker's exit code, as without @record
      const auto err = a.err();
      if (n == 0 || verbose) {
        // Node 0 learned of it only through the abort: the traceback travelled with it.
        CHECK_THAT(err, Catch::Contains("error     : ValueError: distinctive-message") &&
                            Catch::Contains("traceback (from TORCHELASTIC_ERROR_FILE):") &&
                            Catch::Contains("in load_shard_distinctive_frame"));
      } else {
        CHECK_THAT(err, Catch::Contains("root cause rank 1 on") &&
                            Catch::Contains("(ValueError: distinctive-message)"));
      }
      const auto report =
          nlohmann::json::parse(read_file(job.dir / ("err.node" + std::to_string(n) + ".json")));
      const auto& root = report.at("root_cause");
      CHECK(root.at("rank") == 1);
      CHECK(root.at("error_message") == "ValueError: distinctive-message");
      CHECK_THAT(root.at("traceback").get<std::string>(), Catch::Contains("in load_shard_distinctive_frame"));
    }
    if (verbose) {
      CHECK(std::filesystem::exists(job.dir / "logs/attempt_0/rank_1/error.json"));
    }
    CHECK(error_dirs_in(job.dir / "tmp") == 0);  // the private directory went with ddprun
  }
}

TEST_CASE("a malformed, huge or overlong error file never breaks the report", "[e2e][python]") {
  const std::string python = torch_python();
  struct Row {
    std::string kind;
    std::string expect;  // in the report; "" for no error line at all
  };
  const Row table[] = {{"malformed", ""}, {"huge", ""}, {"long", "in innermost_long_frame"}};
  for (const auto& row : table) {
    CAPTURE(row.kind);
    Job job;
    std::filesystem::create_directories(job.dir / "tmp");
    job.env["TMPDIR"] = job.dir / "tmp";
    job.start(1, 1, {script("bad_error_file.py"), row.kind},
              {"--python", python, "--error-file", job.dir / "err.json"});
    job.wait_all();
    const auto err = job.agents[0].err();
    INFO(err);
    CHECK(job.agents[0].code == 1);
    CHECK_THAT(err, Catch::Contains("reason    : exited with code 1"));
    const auto root = nlohmann::json::parse(read_file(job.dir / "err.json")).at("root_cause");
    if (row.expect.empty()) {
      CHECK_THAT(err, !Catch::Contains("error     :"));
      CHECK(root.at("traceback").is_null());
    } else {
      CHECK_THAT(err, Catch::Contains(row.expect) && Catch::Contains("[traceback cut by ddprun"));
      CHECK(root.at("error_message") == "ValueError: long");
      CHECK(root.at("traceback").get<std::string>().size() <= 16 * 1024);
    }
    CHECK(error_dirs_in(job.dir / "tmp") == 0);
  }
}
