#pragma once
// Plan nodes for tests: node1, node2, ... with the given worker counts and GPU list.
#include <string>
#include <vector>

#include "core/plan.hpp"

namespace ddprun::test {

inline std::vector<core::NodeSpec> nodes(std::vector<int> lws, std::vector<std::string> gpus = {}) {
  std::vector<core::NodeSpec> out;
  for (std::size_t i = 0; i < lws.size(); ++i) {
    out.push_back({static_cast<int>(i), "node" + std::to_string(i + 1), lws[i], gpus, "", false});
  }
  return out;
}

}  // namespace ddprun::test
