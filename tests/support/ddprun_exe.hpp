#pragma once
// The ddprun the tests run (DDPRUN_EXE, included in every test unit by tests/CMakeLists.txt): DDPRUN_TEST_EXE
// when set, so that scripts/portable-check.sh runs the loopback suite with the portable binary installed from
// the wheel, else the one this build made.
#include <cstdlib>

namespace ddprun::test {

inline const char* ddprun_exe() {
  static const char* const exe = [] {
    const char* e = std::getenv("DDPRUN_TEST_EXE");
    return e != nullptr && *e != '\0' ? e : DDPRUN_BUILT_EXE;
  }();
  return exe;
}

}  // namespace ddprun::test
