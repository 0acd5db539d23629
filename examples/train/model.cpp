#include "model.hpp"

#include "core.hpp"

namespace ddprun::train {

NetImpl::NetImpl(const std::string& kind) {
  using torch::nn::Linear;
  using torch::nn::ReLU;
  if (kind == "toy") {
    head = torch::nn::Sequential(Linear(32, 32), ReLU());
    tail = torch::nn::Sequential(Linear(32, 10));
  } else if (kind == "mlp") {
    head = torch::nn::Sequential(Linear(784, 256), ReLU());
    tail = torch::nn::Sequential(Linear(256, 128), ReLU(), Linear(128, 10));
  } else if (kind == "ae") {
    head = torch::nn::Sequential(Linear(784, 128), ReLU(), Linear(128, 128), ReLU());
    tail = torch::nn::Sequential(Linear(128, 128), ReLU(), Linear(128, 784));
  } else {
    throw Error("unknown model '" + kind + "'");
  }
  register_module("head", head);
  register_module("tail", tail);
}

void NetImpl::place(torch::Device h, torch::Device t) {
  head_dev = h;
  tail_dev = t;
  head->to(h);
  tail->to(t);
}

torch::Tensor NetImpl::forward(torch::Tensor x) {
  auto mid = head->forward(x.to(head_dev));
  return tail->forward(mid.to(tail_dev));
}

torch::Tensor compute_loss(const std::string& model, const torch::Tensor& out, const torch::Tensor& x,
                           const torch::Tensor& y) {
  if (model == "mlp") {
    return torch::nn::functional::cross_entropy(out, y.to(out.device()));
  }
  if (model == "ae") {
    return torch::mse_loss(out, x.to(out.device()));
  }
  return torch::mse_loss(out, y.to(out.device()));
}

// Gradients are set to none rather than zeroed: autograd then hands over its fresh buffer
// (no zero pass, no accumulate), and the reducer's bucket views are never written by it.
void clear_grads(Net& net) {
  for (auto& p : net->parameters()) {
    p.mutable_grad() = torch::Tensor();
  }
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(Net& net, const Options& o) {
  if (o.optimizer == "adam") {
    return std::make_unique<torch::optim::Adam>(net->parameters(),
                                                torch::optim::AdamOptions(o.lr > 0 ? o.lr : 1e-3));
  }
  if (o.optimizer == "sgd") {
    return std::make_unique<torch::optim::SGD>(
        net->parameters(), torch::optim::SGDOptions(o.lr > 0 ? o.lr : 0.05).momentum(o.momentum));
  }
  throw Error("unknown --optimizer '" + o.optimizer + "' (use sgd or adam)");
}

}  // namespace ddprun::train
