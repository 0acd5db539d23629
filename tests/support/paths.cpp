#include "support/paths.hpp"

#include <cstdlib>

namespace ddprun_test {
// DDPRUN_TEST_EXE, when set, names another ddprun to test: scripts/portable-check.sh runs the loopback suite
// with the portable binary installed from the wheel.
std::string ddprun_exe() {
  const char* other = std::getenv("DDPRUN_TEST_EXE");
  return other != nullptr && *other != '\0' ? other : DDPRUN_EXE;
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
