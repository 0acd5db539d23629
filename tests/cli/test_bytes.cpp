// The dry-run as users meet it in odd places: bytes that are not UTF-8, an salloc shell with no GPUs.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "run_process.hpp"
#include "support/paths.hpp"

using namespace ddprun::test;

TEST_CASE("dry-run JSON with a Latin-1 argument and environment value is valid JSON",
          "[cli][dryrun][bytes]") {
  const std::string latin1 = "caf\xe9";  // 'café' in Latin-1: not UTF-8
  const auto r = run_process({ddprun_test::ddprun_exe(), "--dry-run", "--format", "json", "--nproc-per-node",
                              "2", "--no-python", "--", "/bin/echo", latin1},
                             {{"OMP_NUM_THREADS", latin1}});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.err.find("json.exception") == std::string::npos);
  nlohmann::json j;
  REQUIRE_NOTHROW(j = nlohmann::json::parse(r.out));
  CHECK(j.at("workers").size() == 2);
  // The argument is kept, its invalid byte replaced by U+FFFD.
  CHECK(r.out.find("caf\xef\xbf\xbd") != std::string::npos);
}

TEST_CASE("dry-run in an salloc shell: GPU counts come from the nodes, and no node is this one",
          "[cli][dryrun][slurm]") {
  const std::map<std::string, std::string> salloc = {{"SLURM_JOB_ID", "78"},
                                                     {"SLURM_JOB_NODELIST", "gpu[1-2]"},
                                                     {"SLURM_NODELIST", "gpu[1-2]"},
                                                     {"SLURM_JOB_NUM_NODES", "2"},
                                                     {"SLURM_NNODES", "2"},
                                                     {"SLURM_NTASKS", "2"},
                                                     {"SLURM_TASKS_PER_NODE", "1(x2)"}};
  const auto r = run_process(
      {ddprun_test::ddprun_exe(), "--dry-run", "--nproc-per-node", "gpu", "--no-python", "--", "/bin/true"},
      salloc);
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("each node's agent counts its own GPUs") != std::string::npos);
  CHECK(r.out.find("this node") == std::string::npos);
  const auto j = run_process({ddprun_test::ddprun_exe(), "--dry-run", "--format", "json", "--nproc-per-node",
                              "gpu", "--no-python", "--", "/bin/true"},
                             salloc);
  REQUIRE(j.code == 0);
  CHECK(nlohmann::json::parse(j.out).at("gpus_from_nodes") == true);
}

TEST_CASE("ddprun started by a ddprun worker says launchers do not nest", "[cli][error]") {
  // The worker's command runs ddprun again: the inner one must refuse at once, naming the outer run.
  const auto r = run_process({ddprun_test::ddprun_exe(), "--nproc-per-node", "1", "--no-python", "--",
                              ddprun_test::ddprun_exe(), "--no-python", "--", "/bin/true"},
                             {{"DDPRUN_RDZV_AUTH", "none"}});
  INFO(r.err);
  CHECK(r.code == 2);
  CHECK(r.err.find("inside a worker of another launch") != std::string::npos);
  CHECK(r.err.find("launchers do not nest") != std::string::npos);
}
