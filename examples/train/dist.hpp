// Process groups and the few collectives the trainer needs outside the gradient reducer:
// parameter broadcast, the per-step stop vote, sums over the data-parallel group, barriers.
#pragma once

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <string>
#include <vector>

#include "core.hpp"
#include "group.hpp"
#include "options.hpp"

namespace ddprun::train {

struct Dist {
  DistEnv env;
  c10::intrusive_ptr<c10d::Store> store;
  GroupPtr world;  // all ranks: broadcast, stop flag
  GroupPtr dp;     // ranks sharing this MP rank: gradients
  GroupPtr pipe;   // with MP > 1, the stages of this replica (ranked by MP rank): activations, gradients
  torch::Device comm_dev = torch::kCPU;
  // Collectives run with more than one process, and with --backend nccl at any size: a one-rank NCCL
  // communicator, so that a one-GPU machine exercises the NCCL path (scripts/gpu-check.sh).
  bool collective = false;
  bool active() const { return collective; }
};

// c10d stores hold bytes; the set-up handshakes exchange short texts.
void store_set_text(c10d::Store& store, const std::string& key, const std::string& text);
std::string store_get_text(c10d::Store& store, const std::string& key);

// Checks --backend, then (more than one process) joins the store hosted by rank 0 and creates
// the world group, the data-parallel group and (MP > 1) the pipeline group.
Dist init_dist(const DistEnv& env, const Options& o);

// Rank 0's values of params, on every rank.
void broadcast_params(Dist& d, const std::vector<torch::Tensor>& params);

// All ranks agree on the largest requested stop signal (0: keep going). The all-reduce is
// started before a step and read after it, so it overlaps the step instead of adding latency.
class StopVote {
 public:
  StopVote(Dist& d, int local_signal);
  int result();

 private:
  Dist& d_;
  int local_;
  std::vector<at::Tensor> t_;
  c10::intrusive_ptr<c10d::Work> work_;
};

// Sum of a small vector over all ranks.
std::vector<double> world_sum(Dist& d, std::vector<double> v);

void world_barrier(Dist& d);

}  // namespace ddprun::train
