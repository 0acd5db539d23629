// The models ddprun-train trains (toy, mlp, ae), their losses and optimizers.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>

#include "options.hpp"

namespace ddprun::train {

// Every model is a head and a tail. Plain data parallel keeps both on one device; the
// model-parallel variant puts them on the process's two devices. The split path (move the
// activation between the parts) always runs, so it is exercised on CPU too.
struct NetImpl : torch::nn::Module {
  torch::nn::Sequential head{nullptr}, tail{nullptr};
  torch::Device head_dev = torch::kCPU, tail_dev = torch::kCPU;

  explicit NetImpl(const std::string& kind);
  void place(torch::Device h, torch::Device t);
  torch::Tensor forward(torch::Tensor x);
};
TORCH_MODULE(Net);

// The model's training loss: cross-entropy for the classifier, MSE otherwise (ae: against x).
torch::Tensor compute_loss(const std::string& model, const torch::Tensor& out, const torch::Tensor& x,
                           const torch::Tensor& y);

// Sets every gradient to none (see model.cpp for why not zero).
void clear_grads(Net& net);

// The --optimizer with its default learning rate unless --lr is given.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(Net& net, const Options& o);

}  // namespace ddprun::train
