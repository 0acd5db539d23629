// Pipeline parallelism: with DDPRUN_MP_SIZE = P > 1 the P processes of a model-parallel group
// each run one stage, a consecutive range of the model's layers. Activations go forward and
// their gradients backward between neighbouring stages by point-to-point send/recv over the
// group's own process group, micro-batch by micro-batch (GPipe: every forward, then every
// backward). With one stage the same code runs locally, without any message.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core.hpp"
#include "dist.hpp"
#include "group.hpp"
#include "model.hpp"

namespace ddprun::train {

class Pipe {
 public:
  // This rank's stage of the model's layers (Dist's MP rank and size).
  Pipe(Dist& d, const Net& net, const std::string& model);

  int stage() const { return stage_; }
  int stages() const { return stages_; }
  int first_layer() const { return ranges_[static_cast<std::size_t>(stage_)].first; }
  int last_layer() const { return ranges_[static_cast<std::size_t>(stage_)].last; }
  StageLayers layers_of(int stage) const { return ranges_.at(static_cast<std::size_t>(stage)); }
  bool is_first() const { return stage_ == 0; }
  bool is_last() const { return stage_ == stages_ - 1; }
  // Seconds this rank spent waiting for a neighbour's activation or gradient, in total.
  double wait_seconds() const { return wait_s_; }

  // Blocking receive from stage `from`, into a new tensor of `shape` (float32, or `dtype`).
  torch::Tensor recv(int from, std::vector<std::int64_t> shape, int tag,
                     torch::ScalarType dtype = torch::kFloat32);
  // Starts sending t to stage `to`; the tensor is kept until flush().
  void send(const torch::Tensor& t, int to, int tag);
  // Waits for every send started.
  void flush();

 private:
  GroupPtr group_;
  torch::Device comm_dev_;
  int stage_ = 0;
  int stages_ = 1;
  std::vector<StageLayers> ranges_;
  double wait_s_ = 0;
  std::vector<c10::intrusive_ptr<c10d::Work>> sends_;
  std::vector<at::Tensor> sending_;
};

// Message tags: one per kind, so that no kind can take another's message.
inline constexpr int kTagActivation = 0;
inline constexpr int kTagGradient = 1;
inline constexpr int kTagEval = 2;
inline constexpr int kTagGather = 3;

// One step's forward and backward on this stage, over micro-batches of the given sizes taken in
// order from x and y (this rank's share). The last stage weights each micro-batch's mean loss by
// its share of `weight` (this rank's loss weight), so that the micro-batches' gradients sum to the
// gradient of the rank's weighted mean loss. Returns that weighted loss on the last stage, 0 on
// the others.
double pipeline_step(Pipe& pipe, Net& net, const std::string& model, const torch::Tensor& x,
                     const torch::Tensor& y, const std::vector<std::int64_t>& micro, double weight);

// Stage 0's model gets every stage's layers: the other stages send theirs (checkpoint, parameter dump).
void gather_layers(Pipe& pipe, Net& net);

// Stage 0 gets every stage's bytes, in stage order (the others get only their own back).
std::vector<std::vector<char>> gather_bytes(Pipe& pipe, const std::vector<char>& mine);

}  // namespace ddprun::train
