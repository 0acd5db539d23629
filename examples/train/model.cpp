#include "model.hpp"

#include "core.hpp"

namespace ddprun::train {

// Layer i is Linear(w[i], w[i + 1]) followed by a ReLU, except the last. The first half of the
// layers (at least one) is the head: the names (head.0.weight, tail.0.weight, ...) and the
// initial values of the default depths are those of the earlier two-part models.
NetImpl::NetImpl(const std::string& kind, int layers) {
  const auto w = layer_widths(kind, layers);
  const int n = static_cast<int>(w.size()) - 1;
  const int head_layers = std::max(1, n / 2);
  head = torch::nn::Sequential();
  tail = torch::nn::Sequential();
  for (int i = 0; i < n; ++i) {
    const bool in_head = i < head_layers;
    auto& part = in_head ? head : tail;
    Layer l;
    l.linear = torch::nn::Linear(w[static_cast<std::size_t>(i)], w[static_cast<std::size_t>(i) + 1]);
    l.in_head = in_head;
    l.begin = part->size();
    part->push_back(l.linear);
    if (i + 1 < n) {
      part->push_back(torch::nn::ReLU());
    }
    l.end = part->size();
    layers_.push_back(l);
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
  return forward_layers(std::move(x), 0, num_layers());
}

std::int64_t NetImpl::in_width(int layer) const {
  return layers_.at(static_cast<std::size_t>(layer)).linear->options.in_features();
}

std::int64_t NetImpl::out_width(int layer) const {
  return layers_.at(static_cast<std::size_t>(layer)).linear->options.out_features();
}

torch::Tensor NetImpl::forward_layers(torch::Tensor x, int first, int last) {
  for (int i = first; i < last; ++i) {
    const auto& l = layers_.at(static_cast<std::size_t>(i));
    auto& part = l.in_head ? head : tail;
    x = x.to(l.in_head ? head_dev : tail_dev);
    for (std::size_t k = l.begin; k < l.end; ++k) {
      x = (part->begin() + static_cast<std::ptrdiff_t>(k))->forward(x);
    }
  }
  return x;
}

std::vector<torch::Tensor> NetImpl::layer_parameters(int first, int last) const {
  std::vector<torch::Tensor> out;
  for (int i = first; i < last; ++i) {
    const auto& l = layers_.at(static_cast<std::size_t>(i));
    out.push_back(l.linear->weight);
    out.push_back(l.linear->bias);
  }
  return out;
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
void clear_grads(const std::vector<torch::Tensor>& params) {
  for (auto p : params) {
    p.mutable_grad() = torch::Tensor();
  }
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::vector<torch::Tensor>& params,
                                                        const Options& o) {
  if (o.optimizer == "adam") {
    return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(o.lr > 0 ? o.lr : 1e-3));
  }
  if (o.optimizer == "sgd") {
    return std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(o.lr > 0 ? o.lr : 0.05).momentum(o.momentum));
  }
  throw Error("unknown --optimizer '" + o.optimizer + "' (use sgd or adam)");
}

}  // namespace ddprun::train
