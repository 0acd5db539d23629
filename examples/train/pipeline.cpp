#include "pipeline.hpp"

#include <chrono>
#include <cstring>
#include <utility>

namespace ddprun::train {

Pipe::Pipe(Dist& d, const Net& net, const std::string& model)
    : group_(d.pipe), comm_dev_(d.comm_dev), stage_(d.env.mp_rank), stages_(d.env.mp_size) {
  for (int s = 0; s < stages_; ++s) {
    ranges_.push_back(stage_layers(net->num_layers(), stages_, s, model));
  }
  if (stages_ > 1 && !group_) {
    throw Error("pipeline of " + std::to_string(stages_) + " stages without a process group");
  }
}

torch::Tensor Pipe::recv(int from, std::vector<std::int64_t> shape, int tag, torch::ScalarType dtype) {
  std::vector<at::Tensor> t{torch::empty(shape, torch::TensorOptions().dtype(dtype).device(comm_dev_))};
  const auto t0 = std::chrono::steady_clock::now();
  group_->recv(t, from, tag)->wait();
  wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return t[0];
}

void Pipe::send(const torch::Tensor& t, int to, int tag) {
  std::vector<at::Tensor> v{t.detach().to(comm_dev_).contiguous()};
  sends_.push_back(group_->send(v, to, tag));
  sending_.push_back(v[0]);
}

void Pipe::flush() {
  for (auto& w : sends_) {
    w->wait();
  }
  sends_.clear();
  sending_.clear();
}

double pipeline_step(Pipe& pipe, Net& net, const std::string& model, const torch::Tensor& x,
                     const torch::Tensor& y, const std::vector<std::int64_t>& micro, double weight) {
  const int first = pipe.first_layer();
  const int last = pipe.last_layer();
  std::int64_t len = 0;
  for (auto n : micro) len += n;
  std::vector<torch::Tensor> ins(micro.size()), outs(micro.size());
  // Forward, every micro-batch. All stages of a replica split the same share the same way, so an
  // empty micro-batch (a rank without a sample of a short last batch) is skipped by all: it runs
  // on zero rows locally and still gives every parameter its (zero) gradient.
  std::int64_t off = 0;
  for (std::size_t j = 0; j < micro.size(); ++j) {
    const std::int64_t n = micro[j];
    torch::Tensor in;
    if (pipe.is_first()) {
      in = x.narrow(0, off, n);
    } else {
      in = n == 0 ? torch::zeros({0, net->in_width(first)})
                  : pipe.recv(pipe.stage() - 1, {n, net->in_width(first)}, kTagActivation);
      in.requires_grad_(true);
    }
    auto out = net->forward_layers(in, first, last);
    if (pipe.is_last()) {
      out = n == 0 ? out.sum() * 0.0
                   : compute_loss(model, out, x.narrow(0, off, n), y.narrow(0, off, n)) *
                         (weight * static_cast<double>(n) / static_cast<double>(len));
    } else if (n > 0) {
      pipe.send(out, pipe.stage() + 1, kTagActivation);
    }
    ins[j] = in;
    outs[j] = out;
    off += n;
  }
  // Backward, in the same order, so that every stage's sends and receives pair up.
  double loss = 0;
  for (std::size_t j = 0; j < micro.size(); ++j) {
    const std::int64_t n = micro[j];
    if (pipe.is_last()) {
      outs[j].backward();
      loss += outs[j].item<double>();
    } else {
      auto g = n == 0 ? torch::zeros_like(outs[j])
                      : pipe.recv(pipe.stage() + 1, outs[j].sizes().vec(), kTagGradient).to(outs[j].device());
      outs[j].backward(g);
    }
    if (!pipe.is_first() && n > 0) {
      pipe.send(ins[j].grad(), pipe.stage() - 1, kTagGradient);
    }
    ins[j] = torch::Tensor();
    outs[j] = torch::Tensor();
  }
  pipe.flush();
  return loss;
}

void gather_layers(Pipe& pipe, Net& net) {
  if (pipe.stages() == 1) {
    return;
  }
  torch::NoGradGuard ng;
  if (!pipe.is_first()) {
    std::vector<torch::Tensor> flat;
    for (const auto& p : net->layer_parameters(pipe.first_layer(), pipe.last_layer())) {
      flat.push_back(p.detach().reshape({-1}));
    }
    pipe.send(torch::cat(flat), 0, kTagGather);
    pipe.flush();
    return;
  }
  for (int s = 1; s < pipe.stages(); ++s) {
    const auto r = pipe.layers_of(s);
    auto params = net->layer_parameters(r.first, r.last);
    std::int64_t numel = 0;
    for (const auto& p : params) numel += p.numel();
    const auto flat = pipe.recv(s, {numel}, kTagGather);
    std::int64_t off = 0;
    for (auto& p : params) {
      p.copy_(flat.narrow(0, off, p.numel()).view(p.sizes()));
      off += p.numel();
    }
  }
}

std::vector<std::vector<char>> gather_bytes(Pipe& pipe, const std::vector<char>& mine) {
  std::vector<std::vector<char>> all{mine};
  if (pipe.stages() == 1) {
    return all;
  }
  const auto as_tensor = [](const std::vector<char>& b) {
    return torch::from_blob(const_cast<char*>(b.data()), {static_cast<std::int64_t>(b.size())}, torch::kUInt8)
        .clone();
  };
  if (!pipe.is_first()) {
    pipe.send(torch::tensor({static_cast<std::int64_t>(mine.size())}, torch::kInt64), 0, kTagGather);
    if (!mine.empty()) {
      pipe.send(as_tensor(mine), 0, kTagGather);
    }
    pipe.flush();
    return all;
  }
  for (int s = 1; s < pipe.stages(); ++s) {
    const auto size = pipe.recv(s, {1}, kTagGather, torch::kInt64).cpu().item<std::int64_t>();
    std::vector<char> b(static_cast<std::size_t>(size));
    if (size > 0) {
      const auto t = pipe.recv(s, {size}, kTagGather, torch::kUInt8).cpu().contiguous();
      std::memcpy(b.data(), t.data_ptr<std::uint8_t>(), b.size());
    }
    all.push_back(std::move(b));
  }
  return all;
}

}  // namespace ddprun::train
