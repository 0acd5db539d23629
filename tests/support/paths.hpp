#pragma once
// Where this build put the programs the tests start, and where the sources are. The paths live in one
// small unit (paths.cpp) rather than in every test's flags, so that a clone in another folder reuses the
// test units' compiled objects from ccache and recompiles only that one.
#include <string>

namespace ddprun_test {
std::string ddprun_exe();   // the ddprun binary of this build, or DDPRUN_TEST_EXE when set
std::string source_dir();   // the source tree
std::string binary_dir();   // the build tree
std::string fake_worker();  // tests/helpers/fake_worker of this build
std::string old_kernel();   // tests/helpers/old_kernel: runs a program as on Linux 4.18
}  // namespace ddprun_test
