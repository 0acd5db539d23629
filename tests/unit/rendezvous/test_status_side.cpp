// The observability side of a Rendezvous (local_status): called from the metrics threads, beside whatever
// the main thread does meanwhile.
#include <catch2/catch.hpp>

#include <atomic>
#include <optional>
#include <string>
#include <thread>

#include "rendezvous/rendezvous.hpp"

using namespace ddprun;
using namespace ddprun::rdzv;
using namespace std::chrono_literals;

namespace {

RendezvousOptions serving_options() {
  RendezvousOptions o;
  o.host = "127.0.0.1";
  o.listen_host = "127.0.0.1";
  o.run_id = "status-side";
  o.heartbeat_interval = 50ms;
  o.heartbeat_timeout = 1000ms;
  return o;
}

}  // namespace

// A node 0 cut off from its job follows the store its successor serves: it stops serving its own while
// `--metrics-port`'s thread (it runs for the whole session) goes on asking it. Each call in flight then
// reads the store it found, or none: never one that is gone.
TEST_CASE("a node 0 that stops serving (follow) answers its metrics threads meanwhile") {
  for (int round = 0; round < 100; ++round) {
    Rendezvous successor(serving_options());
    Rendezvous node0(serving_options());
    REQUIRE(node0.serving());
    REQUIRE(node0.try_write("status/0", "record", {.keep = true}));
    std::atomic<bool> stop{false};
    std::atomic<int> answered{0};
    const auto ask = [&] {
      while (!stop.load()) {
        if (node0.local_status("status/0") == std::optional<std::string>("record")) ++answered;
      }
    };
    std::thread metrics(ask);
    std::thread scrape(ask);
    while (answered.load() == 0) std::this_thread::yield();
    REQUIRE(node0.follow("127.0.0.1", successor.port()));
    stop = true;
    metrics.join();
    scrape.join();
    CHECK_FALSE(node0.serving());
    // No longer serving: what this agent kept is what it knows.
    CHECK(node0.local_status("status/0") == std::optional<std::string>("record"));
  }
}
