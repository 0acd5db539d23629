// --version's line, alone in its unit: the build's version and git revision are this unit's compile
// definitions only, so that a new commit recompiles this file and leaves every other one a ccache hit.
#include <fmt/format.h>

#include "launcher/cli.hpp"

namespace ddprun::launcher {

std::string version_string() {
  return fmt::format("ddprun {} (git {}, built {} with g++ {}.{})", DDPRUN_VERSION, DDPRUN_GIT_REV, __DATE__,
                     __GNUC__, __GNUC_MINOR__);
}

}  // namespace ddprun::launcher
