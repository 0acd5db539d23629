#include "core/checks.hpp"

#include <cmath>

#include <fmt/format.h>

namespace ddprun::core {

std::optional<std::string> term_timeout_error(double seconds) {
  if (seconds >= 0) return std::nullopt;
  return "--term-timeout must be 0 or more seconds";
}

std::optional<std::string> hang_timeout_error(double seconds) {
  if (!(seconds > 0 && std::isfinite(seconds))) {
    return fmt::format("--hang-timeout {} must be a positive number of seconds (e.g. 600)", seconds);
  }
  if (seconds < 0.001) return fmt::format("--hang-timeout {} must be at least 0.001 seconds (1 ms)", seconds);
  return std::nullopt;
}

std::optional<std::string> procs_per_replica_error(int procs) {
  if (procs >= 1) return std::nullopt;
  return fmt::format("--procs-per-replica {} must be at least 1", procs);
}

std::optional<std::string> gpus_per_proc_error(int gpus) {
  if (gpus >= 1) return std::nullopt;
  return fmt::format("--gpus-per-proc {} must be at least 1", gpus);
}

}  // namespace ddprun::core
