// `ddprun stacks`' pure part: --rank selections, rank lists, and ranks in the same frames grouped
// once (core/stack_groups.hpp).
#include <catch2/catch.hpp>

#include <string>

#include "core/error.hpp"
#include "core/stack_groups.hpp"

using namespace ddprun::core;

TEST_CASE("stacks rank selections") {
  const std::vector<std::pair<std::string, std::set<int>>> good = {
      {"3", {3}},
      {"0", {0}},
      {"3,7-9", {3, 7, 8, 9}},
      {"7-9,3", {3, 7, 8, 9}},
      {"1-1", {1}},
      {"2,2,1-3", {1, 2, 3}},
  };
  for (const auto& [spec, want] : good) {
    INFO(spec);
    CHECK(parse_rank_selection(spec) == want);
  }
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"", "an empty item"},
      {"3,", "an empty item"},
      {",3", "an empty item"},
      {"a", "'a' is not a rank"},
      {"-1", "'' is not a rank"},
      {"9-7", "the range ends below its start; write it as 7-9"},
      {"3-", "'' is not a rank"},
      {"1-2-3", "'2-3' is not a rank"},
      {"99999999999", "is not a rank"},
      {"0-2000000000", "more than"},
  };
  for (const auto& [spec, words] : bad) {
    INFO(spec);
    try {
      parse_rank_selection(spec);
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK_THAT(e.what(), Catch::Contains(words) && Catch::StartsWith("--rank"));
      CHECK(e.exit_code() == kUsageExit);
    }
  }
}

TEST_CASE("stacks rank lists as runs") {
  const std::vector<std::pair<std::vector<int>, std::string>> table = {
      {{}, ""},
      {{5}, "5"},
      {{0, 1, 2, 3}, "0-3"},
      {{0, 1, 2, 3, 7, 9, 10}, "0-3,7,9-10"},
      {{1, 3, 5}, "1,3,5"},
  };
  for (const auto& [ranks, want] : table) {
    CHECK(format_rank_list(ranks) == want);
  }
}

TEST_CASE("stack signatures set aside pids, thread ids and addresses, nothing else") {
  const std::vector<std::pair<std::string, std::string>> table = {
      {"PID 4242 - process\nTID 4243:\n#0  0x00007f12ab in nanosleep\n",
       "PID ? - process\nTID ?:\n#0  0x? in nanosleep\n"},
      {"Thread 0x00007f0a1b2c3d40 (most recent call first):\n  File \"t.py\", line 3 in known_function_xyz\n",
       "Thread 0x? (most recent call first):\n  File \"t.py\", line 3 in known_function_xyz\n"},
      {"line 3 in f", "line 3 in f"},  // line numbers tell frames apart
      {"0x", "0x"},
      {"PID x", "PID x"},
  };
  for (const auto& [in, want] : table) {
    INFO(in);
    CHECK(stack_signature(in) == want);
  }
}

TEST_CASE("ranks in the same frames print once with their rank list, largest group first") {
  std::vector<RankStack> stacks;
  for (int r = 999; r >= 0; --r) {
    if (r == 7) continue;
    stacks.push_back({r, "Thread 0x00007f" + std::to_string(1000 + r) +
                             " (most recent call first):\n  File \"train.py\", line 10 in all_reduce\n"});
  }
  stacks.push_back({7, "PID 77 - process\nTID 77:\n#0  0x0000000000401136 in spin\n"});
  const auto groups = group_stacks(stacks);
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].ranks.size() == 999);
  CHECK(format_rank_list(groups[0].ranks) == "0-6,8-999");
  CHECK_THAT(groups[0].text, Catch::Contains("Thread 0x00007f1000 "));  // rank 0's, as it came
  CHECK(groups[1].ranks == std::vector<int>{7});
  const std::string out = format_stack_groups(groups);
  CHECK(
      out ==
      "ranks 0-6,8-999 (999 ranks):\n  Thread 0x00007f1000 (most recent call first):\n    File \"train.py\", "
      "line 10 in all_reduce\nrank 7:\n  PID 77 - process\n  TID 77:\n  #0  0x0000000000401136 in spin\n");
}

TEST_CASE("groups of one size come in order of their first rank") {
  const auto groups = group_stacks({{3, "b"}, {1, "a"}, {2, "b"}, {0, "a"}, {5, "c"}});
  REQUIRE(groups.size() == 3);
  CHECK(groups[0].ranks == std::vector<int>{0, 1});
  CHECK(groups[1].ranks == std::vector<int>{2, 3});
  CHECK(groups[2].ranks == std::vector<int>{5});
  CHECK(group_stacks({}).empty());
}
