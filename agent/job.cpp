#include "agent/job.hpp"

#include <fmt/format.h>

namespace ddprun::agent {

int run_job(const launcher::Options&, const launcher::Resolved&) {
  fmt::print(stderr, "ddprun: error: running workers is not built yet; use --dry-run\n");
  return 1;
}

}  // namespace ddprun::agent
