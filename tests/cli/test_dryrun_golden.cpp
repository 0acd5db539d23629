// The dry-run's output, byte for byte, for a set of job shapes: the files in tests/cli/golden/ were
// written by ddprun before the plan became a node table plus a per-node derivation (issue 16); the
// output must not change. DDPRUN_UPDATE_GOLDEN=1 rewrites them (only for an intended change: issue 23
// added each worker's TORCHELASTIC_ERROR_FILE, which the run exports, to the JSON and nothing else).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "run_process.hpp"
#include "support/paths.hpp"

using ddprun::test::run_process;

namespace {

using Env = std::map<std::string, std::string>;

struct Shape {
  std::string name;
  std::vector<std::string> args;
  Env env;
};

Env step(const std::string& nodes, int nnodes, const std::string& tasks, int ntasks, int node, int proc,
         int local, const std::string& gpus) {
  return {{"SLURM_JOB_ID", "77"},
          {"SLURM_STEP_ID", "3"},
          {"SLURM_STEP_NODELIST", nodes},
          {"SLURM_NODELIST", nodes},
          {"SLURM_STEP_NUM_NODES", std::to_string(nnodes)},
          {"SLURM_STEP_NUM_TASKS", std::to_string(ntasks)},
          {"SLURM_STEP_TASKS_PER_NODE", tasks},
          {"SLURM_NODEID", std::to_string(node)},
          {"SLURM_PROCID", std::to_string(proc)},
          {"SLURM_LOCALID", std::to_string(local)},
          {"CUDA_VISIBLE_DEVICES", gpus}};
}

std::vector<Shape> shapes() {
  std::vector<Shape> out;
  out.push_back({"agent_gpu_slices",
                 {"--gpus-per-proc", "2", "--", "python3", "train.py", "--lr", "0.1"},
                 step("gpu[07-08]", 2, "1(x2)", 2, 1, 1, 0, "0,1,2,3")});
  out.push_back({"agent_mp_groups",
                 {"--nproc-per-node", "4", "--procs-per-replica", "2", "true"},
                 step("n[1-3]", 3, "1(x3)", 3, 0, 0, 0, "")});
  Env settings = step("big-[001-004]", 4, "1(x4)", 4, 2, 2, 0, "4,5,6,7");
  settings["OMP_NUM_THREADS"] = "3";
  settings["NCCL_ASYNC_ERROR_HANDLING"] = "0";
  settings["SLURM_RESTART_COUNT"] = "2";
  out.push_back(
      {"agent_user_settings",
       {"--rdzv-id", "job-x", "--role", "trainer", "--max-restarts", "3", "--master-port", "31000", "true"},
       settings});
  Env cpus = step("c[1-2]", 2, "1(x2)", 2, 0, 0, 0, "NoDevFiles");
  cpus["SLURM_CPUS_PER_TASK"] = "16";
  out.push_back({"agent_cpus_per_task", {"--nproc-per-node", "3", "true"}, cpus});
  // Heterogeneous: 4 tasks on the first node, 2 on the second; this task is the second node's second,
  // with Slurm rank 3 (a non-block distribution).
  out.push_back({"per_task_hetero", {"true"}, step("p[1-2]", 2, "4,2", 6, 1, 3, 1, "0")});
  out.push_back(
      {"per_task_gpus", {"--gpus-per-proc", "1", "true"}, step("q[1-2]", 2, "2(x2)", 4, 0, 1, 1, "0,1")});
  Env batch = {{"SLURM_JOB_ID", "88"},
               {"SLURM_JOB_NODELIST", "b[1-3]"},
               {"SLURM_JOB_NUM_NODES", "3"},
               {"SLURM_NODELIST", "b[1-3]"},
               {"CUDA_VISIBLE_DEVICES", ""}};
  out.push_back({"batch_no_gpus", {"--nproc-per-node", "2", "true"}, batch});
  // Strings that JSON must escape or replace: quotes, a backslash, a tab, non-ASCII, invalid UTF-8.
  out.push_back({"escaped_strings",
                 {"--rdzv-id",
                  "r\"\x01"
                  "caf\xc3\xa9\xfe",
                  "--role", "t\tb\\", "--", "echo", "a\"b\\c", "tab\there", "caf\xc3\xa9", "bad\xff"},
                 step("e[1-2]", 2, "1(x2)", 2, 0, 0, 0, "0")});
  return out;
}

std::string golden_path(const std::string& name) {
  return ddprun_test::source_dir() + "/tests/cli/golden/" + name;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("dry-run output is byte-identical to the snapshot for every shape", "[cli][dryrun][golden]") {
  const bool update = std::getenv("DDPRUN_UPDATE_GOLDEN") != nullptr;
  for (const auto& s : shapes()) {
    for (const std::string format : {"text", "json"}) {
      std::vector<std::string> argv = {ddprun_test::ddprun_exe(), "--dry-run", "--format", format};
      argv.insert(argv.end(), s.args.begin(), s.args.end());
      const auto r = run_process(argv, s.env);
      const std::string file = golden_path(s.name + "." + format);
      INFO(s.name << " " << format << ": " << r.err);
      REQUIRE(r.code == 0);
      if (update) std::ofstream(file, std::ios::binary) << r.out;
      CHECK(r.out == read_file(file));
    }
  }
}
