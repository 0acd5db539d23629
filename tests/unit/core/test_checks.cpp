// The checks two layers share (core/checks.hpp): which --term-timeout and --hang-timeout values are
// refused, read by core::resolve and agent::validate_options alike.
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
