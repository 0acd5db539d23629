#include "report.hpp"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <vector>

#include "core.hpp"

namespace ddprun::train {

EvalResult evaluate(Net& net, const Data& data, const Options& o, bool classifier) {
  torch::NoGradGuard ng;
  net->eval();
  EvalResult r;
  double loss_sum = 0;
  std::int64_t correct = 0;
  const std::int64_t n = data.test_x.size(0);
  for (std::int64_t i = 0; i < n; i += 1000) {
    const auto len = std::min<std::int64_t>(1000, n - i);
    auto x = data.test_x.narrow(0, i, len);
    auto y = data.test_y.narrow(0, i, len);
    auto out = net->forward(x);
    loss_sum += compute_loss(o.model, out, x, y).item<double>() * static_cast<double>(len);
    if (classifier) {
      correct += out.argmax(1).cpu().eq(y).sum().item<std::int64_t>();
    }
  }
  net->train();
  r.loss = loss_sum / static_cast<double>(n);
  if (classifier) {
    r.accuracy = static_cast<double>(correct) / static_cast<double>(n);
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
