// Training and test data: Fashion-MNIST from IDX files, or synthetic data for the toy model.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace ddprun::train {

struct Data {
  torch::Tensor train_x, train_y, test_x, test_y;
};

// Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from dir, checking every file.
Data load_fashion_mnist(const std::string& dir);

// Synthetic regression data for the toy model, identical on every rank for a given seed.
Data make_toy_data(std::uint64_t seed, std::int64_t n);

}  // namespace ddprun::train
