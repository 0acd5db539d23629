// The ports every node derives alike from a text: the hash and the ports pinned to the values the
// launcher has always derived (a change would make the nodes of a job of mixed versions disagree).
#include <catch2/catch.hpp>

#include "core/derived_port.hpp"
#include "core/per_task.hpp"
#include "core/worker_store.hpp"

using namespace ddprun::core;

TEST_CASE("port_hash: FNV-1a's steps from ddprun's own offset basis") {
  CHECK(port_hash("") == 1469598103934665603ULL);
  CHECK(port_hash("a") == 4953267810257967366ULL);
  CHECK(port_hash("foobar") == 9870438755804841970ULL);
}

TEST_CASE("derived_port: the text's port of 20000-32767, the next free one up when it is taken") {
  struct Row {
    const char* text;
    std::uint16_t taken1, taken2;  // 0: none (never in the range)
    std::uint16_t port;
  };
  const Row rows[] = {
      {"", 0, 0, 29859},
      {"a", 0, 0, 23078},
      {"77.0/node/1", 21000, 21001, 22752},
      {"77.0/node/1", 22752, 0, 22753},      // the job store's port: the next one
      {"77.0/node/1", 0, 22752, 22753},      // the master port: the same
      {"77.0/node/1", 22752, 22753, 22754},  // both, back to back
      {"77.3/worker-relay/1", 20001, 0, 31593},
      {"77.3/worker-relay/1", 31593, 0, 31594},
      {"9.0/node/0", 0, 0, 23194},
      {"1234.5/worker-relay/0", 0, 0, 30722},
      {"wrap/3112", 0, 0, 32767},
      {"wrap/3112", 32767, 0, 20000},  // wraps to the range's start
      {"wrap/3112", 32767, 20000, 20001},
  };
  for (const auto& r : rows) {
    INFO(r.text);
    CHECK(derived_port(r.text, {r.taken1, r.taken2}) == r.port);
  }
}

TEST_CASE("derived_port: the node store's and the relay's ports are derived from their own tags") {
  CHECK(node_store_port("77.0", 1, 21000, 21001) == derived_port("77.0/node/1", {}));
  CHECK(node_store_port("77.0", 1, 21000, 21001) == 22752);
  CHECK(node_store_port("77.0", 1, 22752, 21001) == 22753);
  CHECK(relay_port("77.3", 1, 20001) == 31593);
  CHECK(relay_port("77.3", 1, 31593) == 31594);
}
