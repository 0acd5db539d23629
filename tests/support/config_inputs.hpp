#pragma once
// Inputs for core::resolve in tests: a command line and a workstation.
#include <string>
#include <utility>
#include <vector>

#include "core/config.hpp"

namespace ddprun::test {

inline core::Options cmd(std::vector<std::string> c = {"train.py"}) {
  core::Options o;
  o.command = std::move(c);
  return o;
}

inline core::SystemInfo sys() {
  core::SystemInfo s;
  s.hostname = "ws";
  s.cpu_count = 8;
  return s;
}

}  // namespace ddprun::test
