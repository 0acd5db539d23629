// ddprun-train: a data- and pipeline-parallel libtorch trainer (PyTorch DDP semantics, in C++).
// See docs/trainer.md for usage, checkpoint and preemption semantics. This file is the CLI;
// the run itself is in loop.cpp.
#include <c10/util/Exception.h>

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <string>

#include "core.hpp"
#include "loop.hpp"
#include "options.hpp"

namespace ddprun::train {
namespace {

// What to train: model, data, optimizer. Registration order is the --help order.
void add_training_options(CLI::App& app, Options& o) {
  app.add_option("--model", o.model, "toy | mlp | ae")
      ->check(CLI::IsMember({"toy", "mlp", "ae"}))
      ->capture_default_str();
  app.add_option("--layers", o.layers,
                 "layers of the model (default: toy 2, mlp 3, ae 4); at least one per pipeline stage")
      ->check(CLI::PositiveNumber);
  app.add_option("--data", o.data, "toy | fashion-mnist (default: follows --model)")
      ->check(CLI::IsMember({"toy", "fashion-mnist"}));
  app.add_option("--data-dir", o.data_dir, "directory with MNIST-format IDX files (.gz or plain)")
      ->capture_default_str();
  app.add_option("--epochs", o.epochs, "number of epochs")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--batch-size", o.batch_size,
                 "global batch size, split across DP ranks (kept when the rank count changes)")
      ->capture_default_str();
  app.add_option("--lr", o.lr, "learning rate (default: 1e-3 for adam, 0.05 for sgd)");
  app.add_option("--optimizer", o.optimizer, "sgd | adam (default: adam, sgd for toy)")
      ->check(CLI::IsMember({"sgd", "adam"}));
  app.add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--seed", o.seed, "seed for init, shuffling and toy data")->capture_default_str();
  app.add_option("--threads", o.threads, "intra-op threads (default: OMP_NUM_THREADS, else all)");
}

// How the run goes: communication, checkpoints, outputs, limits.
void add_run_options(CLI::App& app, Options& o) {
  app.add_option("--backend", o.backend, "gloo | nccl")->capture_default_str();
  app.add_option("--allreduce", o.allreduce,
                 "gradient all-reduce: auto (shared memory when the data-parallel group shares a "
                 "node, else the backend) | shm | gloo")
      ->check(CLI::IsMember({"auto", "shm", "gloo"}))
      ->capture_default_str();
  app.add_option("--checkpoint-dir", o.checkpoint_dir, "where rank 0 writes latest.pt");
  app.add_flag("--resume", o.resume,
               "continue from the checkpoint in --checkpoint-dir if any, at any world size");
  app.add_option("--checkpoint-every", o.checkpoint_every, "also checkpoint every N steps (0: off)")
      ->capture_default_str();
  app.add_option("--metrics-file", o.metrics_file, "JSON lines, one per epoch (rank 0)");
  app.add_option("--max-steps", o.max_steps, "stop after N optimizer steps in total (0: off)")
      ->capture_default_str();
  app.add_option("--dump-params", o.dump_params, "rank 0 writes final parameters as JSON");
  app.add_flag("--model-parallel", o.model_parallel, "head and tail on the process's two devices");
  app.add_option("--micro-batches", o.micro_batches,
                 "micro-batches per step and rank, pipelined through the stages of a model-parallel "
                 "group (DDPRUN_MP_SIZE > 1; with one stage: gradient accumulation)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--bucket-cap-kb", o.bucket_cap_kb, "gradient bucket size")->capture_default_str();
  app.add_option("--first-bucket-kb", o.first_bucket_kb, "size of the first gradient bucket")
      ->capture_default_str();
  app.add_option("--timeout", o.timeout_s, "seconds a collective may wait for peers")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--toy-samples", o.toy_samples, "size of the synthetic toy training set")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

// CLI11 writes help and usage errors to streams; pass them on through fmt.
int report_parse_error(const CLI::App& app, const CLI::ParseError& e) {
  std::ostringstream out;
  std::ostringstream err;
  const int rc = app.exit(e, out, err);
  fmt::print("{}", out.str());
  fmt::print(stderr, "{}", err.str());
  return rc == 0 ? 0 : kExitUsage;
}

// Runs and turns any error into one line on stderr, naming the rank, and exit code 1.
int run_reporting_errors(const Options& o) {
  const char* rank = std::getenv("RANK");
  const std::string who = rank ? std::string("ddprun-train[rank ") + rank + "]" : "ddprun-train";
  try {
    const int rc = run(o);
    std::fflush(stdout);
    return rc;
  } catch (const Error& e) {
    fmt::print(stderr, "{}: error: {}\n", who, e.what());
  } catch (const c10::Error& e) {
    fmt::print(stderr, "{}: error: {}\n", who, first_line(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: error: {}\n", who, first_line(e.what()));
  }
  return kExitError;
}

}  // namespace
}  // namespace ddprun::train

int main(int argc, char** argv) {
  using namespace ddprun::train;
  Options o;
  CLI::App app{"ddprun-train: data- and pipeline-parallel libtorch trainer (see docs/trainer.md)"};
  // A repeated option takes its last value, so wrappers can append overrides.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_training_options(app, o);
  add_run_options(app, o);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return report_parse_error(app, e);
  }
  return run_reporting_errors(o);
}
