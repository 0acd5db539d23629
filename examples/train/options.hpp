// ddprun-train's command-line options, shared by every unit (see docs/trainer.md).
#pragma once

#include <cstdint>
#include <string>

namespace ddprun::train {

struct Options {
  std::string model = "mlp";
  int layers = 0;    // 0: the model's default depth
  std::string data;  // empty: follows the model
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int epochs = 1;
  std::int64_t batch_size = 64;
  double lr = 0.0;        // 0: the optimizer's default
  std::string optimizer;  // empty: adam for mlp/ae, sgd for toy
  double momentum = 0.0;
  std::uint64_t seed = 0;
  int threads = 0;
  std::string backend = "gloo";
  std::string allreduce = "auto";  // gradients: auto (shm when the group shares a node) | shm | gloo
  std::string checkpoint_dir;
  bool resume = false;
  std::int64_t checkpoint_every = 0;
  std::string metrics_file;
  std::int64_t max_steps = 0;
  std::string dump_params;
  bool model_parallel = false;
  int micro_batches = 1;  // per step and rank, pipelined through the stages (DDPRUN_MP_SIZE > 1)
  std::int64_t bucket_cap_kb = 25 * 1024;  // DDP's defaults: 25 MB, first bucket 1 MB
  std::int64_t first_bucket_kb = 1024;
  int timeout_s = 300;
  std::int64_t toy_samples = 1024;
};

}  // namespace ddprun::train
