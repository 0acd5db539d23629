// The connect retry delays: exponential, capped, jittered.
#include <catch2/catch.hpp>

#include <chrono>
#include <vector>

#include "store/backoff.hpp"

using ddprun::store::Backoff;
using namespace std::chrono_literals;

namespace {

double ms(Backoff::Duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

}  // namespace

TEST_CASE("backoff: each delay is the interval times 0.5 to 1.5 and the interval doubles up to the cap",
          "[backoff]") {
  Backoff b(50ms, 1000ms, 42);
  for (double interval : {50.0, 100.0, 200.0, 400.0, 800.0, 1000.0, 1000.0, 1000.0}) {
    const double d = ms(b.next());
    INFO("interval " << interval << " ms, delay " << d << " ms");
    CHECK(d >= 0.5 * interval);
    CHECK(d < 1.5 * interval);
  }
}

TEST_CASE("backoff: the seed fixes the jitter and different seeds spread retries apart", "[backoff]") {
  auto run = [](std::uint32_t seed) {
    Backoff b(50ms, 1000ms, seed);
    std::vector<Backoff::Duration> out;
    for (int i = 0; i < 6; ++i) out.push_back(b.next());
    return out;
  };
  CHECK(run(7) == run(7));
  CHECK(run(7) != run(8));
}
