#include "report.hpp"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <vector>

#include "core.hpp"

namespace ddprun::train {

EvalResult evaluate(Pipe& pipe, Net& net, const Data& data, const Options& o, bool classifier) {
  torch::NoGradGuard ng;
  net->eval();
  double loss_sum = 0;
  std::int64_t correct = 0;
  const std::int64_t n = data.test_x.size(0);
  const int first = pipe.first_layer();
  const int last = pipe.last_layer();
  for (std::int64_t i = 0; i < n; i += 1000) {
    const auto len = std::min<std::int64_t>(1000, n - i);
    auto x = data.test_x.narrow(0, i, len);
    auto y = data.test_y.narrow(0, i, len);
    auto in = pipe.is_first() ? x : pipe.recv(pipe.stage() - 1, {len, net->in_width(first)}, kTagEval);
    auto out = net->forward_layers(in, first, last);
    if (!pipe.is_last()) {
      pipe.send(out, pipe.stage() + 1, kTagEval);
      continue;
    }
    loss_sum += compute_loss(o.model, out, x, y).item<double>() * static_cast<double>(len);
    if (classifier) {
      correct += out.argmax(1).cpu().eq(y).sum().item<std::int64_t>();
    }
  }
  pipe.flush();
  // The last stage has the sums; stage 0 reports them.
  auto sums = torch::tensor({loss_sum, static_cast<double>(correct)}, torch::kFloat64);
  if (pipe.stages() > 1 && pipe.is_last()) {
    pipe.send(sums, 0, kTagEval);
    pipe.flush();
  } else if (pipe.stages() > 1 && pipe.is_first()) {
    sums = pipe.recv(pipe.stages() - 1, {2}, kTagEval, torch::kFloat64).cpu();
  }
  net->train();
  EvalResult r;
  r.loss = sums[0].item<double>() / static_cast<double>(n);
  if (classifier) {
    r.accuracy = sums[1].item<double>() / static_cast<double>(n);
  }
  return r;
}

void append_metrics(const std::string& path, const nlohmann::json& rec) {
  std::ofstream out(path, std::ios::app);
  out << rec.dump() << "\n";
  if (!out) {
    throw Error("cannot append to --metrics-file " + path);
  }
}

void dump_params(Net& net, const std::string& path) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& kv : net->named_parameters()) {
    auto t = kv.value().detach().cpu().to(torch::kFloat64).contiguous().view({-1});
    std::vector<double> v(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
    j[kv.key()] = v;
  }
  std::ofstream out(path);
  out << j.dump() << "\n";
  if (!out) {
    throw Error("cannot write --dump-params file " + path);
  }
}

}  // namespace ddprun::train
