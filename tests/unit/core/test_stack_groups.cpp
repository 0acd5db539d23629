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

TEST_CASE("stacks requests travel as nonce and selection, malformed ones refused") {
  StacksRequest all{"abc123", std::nullopt};
  const auto a = decode_stacks_request(encode_stacks_request(all));
  CHECK(a.nonce == "abc123");
  CHECK_FALSE(a.ranks.has_value());
  StacksRequest some{"n1", std::set<int>{3, 7, 8, 9}};
  const auto b = decode_stacks_request(encode_stacks_request(some));
  CHECK(b.ranks == std::set<int>{3, 7, 8, 9});
  CHECK_THAT(encode_stacks_request(some), Catch::Contains("\"3,7-9\""));
  for (const std::string bad :
       {"", "{}", "[1]", R"({"nonce":"","ranks":null})", R"({"nonce":"a/b","ranks":null})",
        R"({"nonce":"ok","ranks":"x"})", R"({"nonce":7,"ranks":null})", "{\"nonce\":"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(decode_stacks_request(bad), Error);
  }
  CHECK(stacks_reply_key("n1", 4) == "/stacks/n1/4");
}

TEST_CASE("a node's stacks reply round-trips with any bytes in the text") {
  NodeStacks n{2, "host-a", {{4, "frame\n\x01\xff\n"}, {5, ""}}};
  const auto back = decode_node_stacks(encode_node_stacks(n));
  CHECK(back.node_rank == 2);
  CHECK(back.host == "host-a");
  REQUIRE(back.ranks.size() == 2);
  CHECK(back.ranks[0].rank == 4);
  CHECK(back.ranks[0].text == "frame\n\x01\xEF\xBF\xBD\n");  // invalid UTF-8 as U+FFFD
  CHECK(back.ranks[1].text.empty());
  for (const std::string bad : {"", "null", R"({"node_rank":1.5,"host":"h","ranks":[]})",
                                R"({"node_rank":1,"host":"h","ranks":[{"rank":1}]})"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(decode_node_stacks(bad), Error);
  }
}

TEST_CASE("the stacks marker a registered Python worker writes") {
  const std::vector<std::pair<std::string, std::optional<long>>> table = {
      {"ddprun-stacks 1234\n", 1234},
      {"ddprun-stacks 1234\nCurrent thread 0x1 (most recent call first):\n", 1234},
      {"ddprun-stacks 1234", std::nullopt},  // not written whole yet
      {"ddprun-stacks 0\n", std::nullopt},
      {"ddprun-stacks -5\n", std::nullopt},
      {"ddprun-stacks 12x\n", std::nullopt},
      {"ddprun-stacks \n", std::nullopt},
      {"Current thread 0x1\n", std::nullopt},
      {"", std::nullopt},
  };
  for (const auto& [head, pid] : table) {
    CAPTURE(head);
    CHECK(parse_stacks_marker(head) == pid);
  }
}
