// Checkpoints: rank 0 writes DIR/latest.pt atomically; on resume every rank loads the bytes
// rank 0 read (see docs/trainer.md for what a checkpoint holds).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core.hpp"
#include "dist.hpp"
#include "model.hpp"
#include "options.hpp"
#include "pipeline.hpp"

namespace ddprun::train {

struct Position {
  std::int64_t epoch = 0;  // epoch to run next (0-based)
  std::int64_t batch = 0;  // next batch inside that epoch
  std::int64_t step = 0;   // optimizer steps done in total
};

// A loaded checkpoint's position, and the run that wrote it.
struct Resumed {
  Position pos;
  int world_size = 0;        // 0: unknown (format 1)
  int dp_size = 0;           // 0: unknown (format 1)
  std::int64_t samples = 0;  // samples of pos.epoch already trained: pos.batch global batches
};

// DIR/latest.pt for --checkpoint-dir DIR.
std::string checkpoint_path(const Options& o);

// Restores the model, this stage's optimizer and the RNG from a checkpoint's bytes and returns
// where it left off. Refuses another model kind, depth, global batch or pipeline split, or an
// unknown format; `what` names the file.
Resumed load_checkpoint(const std::vector<char>& bytes, Net& net, torch::optim::Optimizer& opt,
                        const Pipe& pipe, const Options& o, const std::string& what);

// Rank 0 writes the checkpoint, with env's world and DP size (nothing without --checkpoint-dir).
// With a pipeline the stages of the first replica first hand their layers and optimizer state
// to rank 0 (their first stage), so that one file holds the whole model; other ranks do nothing.
void save_checkpoint(const DistEnv& env, const Options& o, Net& net, torch::optim::Optimizer& opt, Pipe& pipe,
                     const Position& pos);

// Prepares --checkpoint-dir on rank 0 and, with --resume, returns the checkpoint's bytes on
// every rank (none: start fresh). Rank 0 reads the file and hands the bytes to the others
// through the store, so resuming does not need a shared filesystem.
std::optional<std::vector<char>> fetch_checkpoint(Dist& d, const Options& o);

}  // namespace ddprun::train
