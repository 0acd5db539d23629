// The models ddprun-train trains (toy, mlp, ae), their losses and optimizers.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "options.hpp"

namespace ddprun::train {

// Every model is a chain of layers (a Linear and its ReLU), kept in two parts, head and tail.
// Plain data parallel keeps both on one device; --model-parallel puts them on the process's two
// devices. A pipeline stage (DDPRUN_MP_SIZE > 1) runs a range of layers: forward_layers.
// Every process builds the whole chain, so that all draw the same initial values from the seed.
struct NetImpl : torch::nn::Module {
  torch::nn::Sequential head{nullptr}, tail{nullptr};
  torch::Device head_dev = torch::kCPU, tail_dev = torch::kCPU;

  NetImpl(const std::string& kind, int layers);
  void place(torch::Device h, torch::Device t);
  torch::Tensor forward(torch::Tensor x);

  int num_layers() const { return static_cast<int>(layers_.size()); }
  std::int64_t in_width(int layer) const;   // the layer's input features
  std::int64_t out_width(int layer) const;  // its output features
  // Layers [first, last) on x: the input of `first`, moved to each layer's device.
  torch::Tensor forward_layers(torch::Tensor x, int first, int last);
  // The parameters of layers [first, last), in layer order (weight, bias).
  std::vector<torch::Tensor> layer_parameters(int first, int last) const;

 private:
  struct Layer {
    torch::nn::Linear linear{nullptr};
    bool in_head = true;
    std::size_t begin = 0, end = 0;  // its modules in head or tail
  };
  std::vector<Layer> layers_;
};
TORCH_MODULE(Net);

// The model's training loss: cross-entropy for the classifier, MSE otherwise (ae: against x).
torch::Tensor compute_loss(const std::string& model, const torch::Tensor& out, const torch::Tensor& x,
                           const torch::Tensor& y);

// Sets every gradient to none (see model.cpp for why not zero).
void clear_grads(const std::vector<torch::Tensor>& params);

// The --optimizer over params with its default learning rate unless --lr is given.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::vector<torch::Tensor>& params,
                                                        const Options& o);

}  // namespace ddprun::train
