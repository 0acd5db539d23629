// The elastic decisions (docs/elastic.md): who goes on after a loss, and who serves the store.
#include <catch2/catch.hpp>

#include "core/elastic.hpp"

using namespace ddprun::core;

namespace {
std::vector<Member> four() {
  return {{0, "a", false}, {1, "b", false}, {2, "c", false}, {3, "d", false}};
}
}  // namespace

TEST_CASE("after a loss the survivors go on while MIN remain and they hold a majority", "[elastic]") {
  SECTION("one of four lost with MIN 3") {
    const auto d = after_loss(four(), {2}, 3, true);
    CHECK(d.go_on);
    REQUIRE(d.survivors.size() == 3);
    CHECK(d.survivors[2].host == "d");
  }
  SECTION("below MIN names the lost nodes and MIN") {
    const auto d = after_loss(four(), {1, 3}, 3, true);
    CHECK_FALSE(d.go_on);
    CHECK(d.message ==
          "lost b (node rank 1), d (node rank 3); 2 nodes left, fewer than the minimum of 3 "
          "(--nnodes 3:MAX), and no standby was waiting");
  }
  SECTION("agents waiting for the next round count towards MIN, not towards the majority") {
    CHECK_FALSE(after_loss(four(), {3}, 4, true).go_on);
    CHECK(after_loss(four(), {3}, 4, true, 1).go_on);
    const auto d = after_loss(four(), {1, 3}, 4, true, 1);
    CHECK_FALSE(d.go_on);
    CHECK(
        d.message ==
        "lost b (node rank 1), d (node rank 3); 3 nodes left with the standbys, fewer than the minimum of 4 "
        "(--nnodes 4:MAX)");
    CHECK(after_loss(four(), {0, 1}, 1, true, 3).message.find("2 of 4 left, not a strict majority") !=
          std::string::npos);
  }
  SECTION("standbys of the round count towards MIN") {
    auto m = four();
    m[3].standby = true;
    CHECK(after_loss(m, {0}, 3, true).go_on);
    CHECK(after_loss(m, {0, 1}, 3, true).message.find("2 nodes left with the standbys, fewer than") !=
          std::string::npos);
  }
  SECTION("half is not a majority") {
    const auto d = after_loss(four(), {0, 1}, 1, true);
    CHECK_FALSE(d.go_on);
    CHECK(d.message.find("2 of 4 left, not a strict majority") != std::string::npos);
  }
  SECTION("a fail-fast job never goes on") {
    const auto d = after_loss(four(), {3}, 1, false);
    CHECK_FALSE(d.go_on);
    CHECK(d.message.find("lost d (node rank 3); the job is not elastic") == 0);
  }
  SECTION("an unnamed host is named by its node rank") {
    auto m = four();
    m[1].host.clear();
    CHECK(after_loss(m, {1}, 4, true).message.find("lost node rank 1;") == 0);
  }
}

TEST_CASE("a lost node in a fail-fast job is always explained, in an elastic one when a restart was due",
          "[elastic]") {
  struct Row {
    std::vector<int> lost;
    int min;
    bool elastic;
    bool restart_due;
    const char* message;  // the start of the line; null: the loss does not end the job
  };
  const Row rows[] = {
      {{3}, 4, false, true, "lost d (node rank 3); the job is not elastic"},
      {{3}, 4, false, false, "lost d (node rank 3); the job is not elastic"},  // no --max-restarts
      {{2}, 3, true, true, nullptr},                                           // goes on without it
      {{2}, 3, true, false, nullptr},  // restarts used up: the job ends for that, not for the loss
      // Fewer than MIN: the next round judges, with the standbys (late ones too) that wait there.
      {{1, 3}, 3, true, true, nullptr},
      {{0, 1}, 1, true, true, "lost a (node rank 0), b (node rank 1); 2 of 4 left, not a strict majority"},
      {{1, 3}, 3, true, false, nullptr},
      {{}, 4, false, false, nullptr},  // nothing lost
  };
  for (const auto& row : rows) {
    INFO("lost " << row.lost.size() << " min " << row.min << " elastic " << row.elastic << " restart due "
                 << row.restart_due);
    const auto m = loss_ends_job(four(), row.lost, row.min, row.elastic, row.restart_due);
    if (row.message == nullptr) {
      CHECK_FALSE(m.has_value());
    } else {
      REQUIRE(m.has_value());
      CHECK(m->starts_with(row.message));
    }
  }
}

TEST_CASE("majority is strict", "[elastic]") {
  CHECK(has_majority(3, 5));
  CHECK_FALSE(has_majority(2, 4));
  CHECK(has_majority(1, 1));
  CHECK_FALSE(has_majority(0, 1));
}

TEST_CASE("shrink floor: how far an elastic job shrinks losing one node at a time", "[elastic]") {
  struct Row {
    int agents, min, floor;
  };
  // 2 nodes survive no loss (1 of 2 is no majority), whatever MIN says; 3 lose one; 4 stop at 2.
  const Row table[] = {{2, 1, 2}, {3, 1, 2}, {4, 1, 2}, {5, 1, 2},
                       {5, 4, 4}, {8, 3, 3}, {3, 3, 3}, {1, 1, 1}};
  for (const auto& row : table) {
    CAPTURE(row.agents, row.min);
    CHECK(shrink_floor(row.agents, row.min) == row.floor);
    // The same as after_loss deciding each single loss in turn.
    std::vector<Member> members;
    for (int i = 0; i < row.agents; ++i) members.push_back({i, "h" + std::to_string(i), false});
    while (members.size() > 1) {
      const auto d = after_loss(members, {static_cast<int>(members.size()) - 1}, row.min, true);
      if (!d.go_on) break;
      members = d.survivors;
    }
    CHECK(static_cast<int>(members.size()) == row.floor);
  }
}

TEST_CASE("the new store host is the first survivor in node order", "[elastic]") {
  CHECK(failover_host(four(), {0}) == 1);
  CHECK(failover_host(four(), {0, 1}) == 2);
  CHECK(failover_host(four(), {2}) == 0);
  CHECK_FALSE(failover_host(four(), {0, 1, 2, 3}).has_value());
  CHECK(failover_port(29400, 0, 29500) == 29400);
  CHECK(failover_port(29400, 2, 29500) == 29402);
  // Under Slurm MASTER_PORT is the store's port + 1: skipped.
  CHECK(failover_port(27512, 1, 27513) == 27514);
  CHECK(failover_port(27512, 2, 27513) == 27515);
  CHECK(failover_port(27512, 1, 20000) == 27513);
}

TEST_CASE("membership change names the lost, the promoted and the new", "[elastic]") {
  std::vector<Member> before = four();
  before.push_back({4, "e", true});
  const std::vector<Member> after = {{0, "a", false}, {1, "b", false}, {3, "d", false}, {4, "e", false}};
  const auto c = membership_change(before, after);
  REQUIRE(c.lost.size() == 1);
  CHECK(c.lost[0].host == "c");
  REQUIRE(c.promoted.size() == 1);
  CHECK(c.promoted[0].orig_rank == 4);
  CHECK(c.joined.empty());
  CHECK(membership_change(after, after).empty());
  CHECK(describe_members(before, c.lost) == "c (node rank 2)");
}
