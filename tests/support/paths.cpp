#include "support/paths.hpp"

namespace ddprun_test {
std::string ddprun_exe() {
  return DDPRUN_EXE;
}
std::string source_dir() {
  return DDPRUN_SOURCE_DIR;
}
std::string binary_dir() {
  return DDPRUN_BINARY_DIR;
}
std::string fake_worker() {
  return FAKE_WORKER;
}
std::string old_kernel() {
  return OLD_KERNEL;
}
}  // namespace ddprun_test
