// The checks shared by more than one place (core/checks.hpp): which --term-timeout, --hang-timeout,
// --procs-per-replica and --gpus-per-proc values are refused, read by core::resolve,
// agent::validate_options and the plan's job check alike.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/checks.hpp"

using namespace ddprun::core;

TEST_CASE("term_timeout_error: 0 or more seconds", "[checks]") {
  struct Row {
    double seconds;
    bool refused;
  };
  const std::vector<Row> rows = {{0, false}, {10, false},    {0.5, false},
                                 {-1, true}, {-0.001, true}, {std::nan(""), true}};
  for (const auto& r : rows) {
    CAPTURE(r.seconds);
    const auto e = term_timeout_error(r.seconds);
    CHECK(e.has_value() == r.refused);
    if (e) CHECK(e->find("--term-timeout") != std::string::npos);
  }
}

TEST_CASE("hang_timeout_error: positive, finite, at least 1 ms", "[checks]") {
  struct Row {
    double seconds;
    bool refused;
  };
  const std::vector<Row> rows = {{600, false},
                                 {0.001, false},
                                 {0.5, false},
                                 {0, true},
                                 {-5, true},
                                 {0.0001, true},
                                 {std::numeric_limits<double>::infinity(), true},
                                 {std::nan(""), true}};
  for (const auto& r : rows) {
    CAPTURE(r.seconds);
    const auto e = hang_timeout_error(r.seconds);
    CHECK(e.has_value() == r.refused);
    if (e) CHECK(e->find("--hang-timeout") != std::string::npos);
  }
}

TEST_CASE("procs_per_replica_error and gpus_per_proc_error: at least 1", "[checks]") {
  for (const int n : {1, 2, 8, 1024}) {
    CAPTURE(n);
    CHECK_FALSE(procs_per_replica_error(n));
    CHECK_FALSE(gpus_per_proc_error(n));
  }
  for (const int n : {0, -1, -1024}) {
    CAPTURE(n);
    CHECK(procs_per_replica_error(n).value_or("").find("--procs-per-replica") != std::string::npos);
    CHECK(gpus_per_proc_error(n).value_or("").find("--gpus-per-proc") != std::string::npos);
  }
}
