#pragma once
// The interpreter the tests run real PyTorch workers with. CTest registers every test that runs
// them twice: as is, with Debian's torch 1.13 at /usr/bin/python3, and again under the label
// torch2 with DDPRUN_TEST_PYTHON naming the project's torch 2.x venv (scripts/torch2.sh).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace ddprun::test {

// Exit code CTest reads as "skipped" (SKIP_RETURN_CODE 77 on the torch2 tests).
inline constexpr int kSkipExit = 77;

// DDPRUN_TEST_PYTHON when set, else /usr/bin/python3. A named interpreter that is not there, or an empty
// name (setup.sh ran with DDPRUN_SKIP_TORCH2=1; CMake found no venv path) ends the test binary with 77 and a
// line saying so, so that the torch2 copy of a test is reported as skipped instead of passing without
// torch 2.x. Call it first thing in a test, before anything that would need cleaning up.
inline std::string torch_python() {
  const char* named = std::getenv("DDPRUN_TEST_PYTHON");
  if (named == nullptr) return "/usr/bin/python3";
  if (*named == '\0' || ::access(named, X_OK) != 0) {
    std::fprintf(stderr,
                 "SKIP: DDPRUN_TEST_PYTHON='%s' is not an interpreter: the torch 2.x venv is not installed "
                 "(scripts/setup.sh installs it unless DDPRUN_SKIP_TORCH2=1; scripts/torch2.sh says where)\n",
                 named);
    std::fflush(stderr);
    std::_Exit(kSkipExit);
  }
  return named;
}

}  // namespace ddprun::test
