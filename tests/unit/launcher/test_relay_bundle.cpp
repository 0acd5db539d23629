// Per-task mode: a node's end-of-run records travel to the master as one bundle and come out per task.
#include <catch2/catch.hpp>

#include "launcher/relay_bundle.hpp"
#include "store/error.hpp"

using namespace ddprun::launcher;
using Records = std::vector<std::optional<std::string>>;

TEST_CASE("relay bundle: records come back as they went, missing ones included") {
  const std::vector<Records> rows = {
      {},
      {std::string("{\"ok\":true}")},
      {std::nullopt},
      {std::string("a"), std::nullopt, std::string("")},
      {std::string("12:34"), std::string("-"), std::string("x\0y\n", 4)},  // looks like the framing; binary
  };
  for (const auto& r : rows) {
    CAPTURE(encode_bundle(r));
    CHECK(decode_bundle(encode_bundle(r)) == r);
  }
}

TEST_CASE("relay bundle: a truncated or garbled bundle is a protocol error") {
  for (const std::string bad : {"5:abc", "x", "3abc", ":abc", "2:ab9"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(decode_bundle(bad), ddprun::store::Error);
  }
}

TEST_CASE("relay bundle: the master unpacks one record per task, in rank order") {
  // Node 1's bundle is missing (its relay was lost), node 2's is garbled; node 0 lacks its second record.
  const std::vector<ddprun::rdzv::ResultRecord> nodes = {
      {0, "n1", encode_bundle({std::string("r0"), std::nullopt})},
      {1, "n2", std::nullopt},
      {2, "n3", std::string("9:short")},
  };
  const std::vector<std::vector<int>> ranks = {{0, 1}, {2, 3}, {4}};
  const auto got = unpack_bundles(nodes, ranks);
  REQUIRE(got.size() == 5);
  for (int i = 0; i < 5; ++i) CHECK(got[static_cast<std::size_t>(i)].node_rank == i);
  CHECK(got[0].host == "n1");
  CHECK(got[0].record == std::optional<std::string>("r0"));
  CHECK_FALSE(got[1].record);
  CHECK(got[2].host == "n2");
  CHECK_FALSE(got[2].record);
  CHECK_FALSE(got[3].record);
  CHECK(got[4].host == "n3");
  CHECK_FALSE(got[4].record);
}
