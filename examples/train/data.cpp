#include "data.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include "core.hpp"

namespace ddprun::train {
namespace {

torch::Tensor images_to_tensor(const IdxArray& a, const std::string& path) {
  if (a.dims.size() != 3 || a.dims[1] * a.dims[2] != 784) {
    throw Error(path + ": expected N x 28 x 28 images");
  }
  auto bytes = torch::from_blob(const_cast<std::uint8_t*>(a.data.data()), {a.dims[0], 784}, torch::kUInt8);
  // Normalise with the Fashion-MNIST pixel mean/std.
  return (bytes.to(torch::kFloat32).div_(255.0).sub_(0.2860).div_(0.3530)).contiguous();
}

torch::Tensor labels_to_tensor(const IdxArray& a, const std::string& path, std::int64_t n) {
  if (a.dims.size() != 1 || a.dims[0] != n) {
    throw Error(path + ": expected " + std::to_string(n) + " labels to match the images");
  }
  for (auto v : a.data) {
    if (v > 9) {
      throw Error(path + ": label " + std::to_string(v) + " is outside 0..9 (corrupt file?)");
    }
  }
  auto bytes = torch::from_blob(const_cast<std::uint8_t*>(a.data.data()), {n}, torch::kUInt8);
  return bytes.to(torch::kInt64).contiguous();
}

// Images first: the labels are checked against their count.
void load_pair(const std::string& dir, const std::string& img_stem, const std::string& lbl_stem,
               torch::Tensor& x, torch::Tensor& y) {
  const auto ip = find_idx_file(dir, img_stem);
  const auto lp = find_idx_file(dir, lbl_stem);
  const auto imgs = read_idx_file(ip);
  x = images_to_tensor(imgs, ip);
  y = labels_to_tensor(read_idx_file(lp), lp, x.size(0));
}

}  // namespace

Data load_fashion_mnist(const std::string& dir) {
  Data d;
  load_pair(dir, "train-images-idx3-ubyte", "train-labels-idx1-ubyte", d.train_x, d.train_y);
  load_pair(dir, "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", d.test_x, d.test_y);
  return d;
}

Data make_toy_data(std::uint64_t seed, std::int64_t n) {
  auto gen = at::detail::createCPUGenerator(seed + 0x5eed);
  Data d;
  auto w = torch::randn({32, 10}, gen);
  auto make = [&](std::int64_t m, torch::Tensor& x, torch::Tensor& y) {
    x = torch::randn({m, 32}, gen);
    y = torch::relu(x).mm(w) * 0.5 + 0.1 * torch::randn({m, 10}, gen);
  };
  make(n, d.train_x, d.train_y);
  make(256, d.test_x, d.test_y);
  return d;
}

}  // namespace ddprun::train
