// Inputs found by fuzzing the hostlist parser (tests/fuzz/fuzz_hostlist.cpp), one test each, so
// the behaviour they exposed is stated in words. The raw inputs are in tests/fuzz/regressions/hostlist/
// and are also replayed by the fuzz_replay_hostlist test.
#include <catch2/catch.hpp>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/hostlist.hpp"
#include "support/paths.hpp"

using ddprun::core::compress_hostlist;
using ddprun::core::expand_hostlist;

namespace {

std::string regression_input(const std::string& name) {
  std::ifstream in(ddprun_test::source_dir() + "/tests/fuzz/regressions/hostlist/" + name, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

// libFuzzer reported a timeout (37 s on a loaded machine, about 2 s when run alone under ASan):
// two ranges of 441 values around 100 bytes of text, 194481 hosts and about 20 MB of names,
// within the caps. Not a hang; kept to assert that such an expansion is complete and exact.
TEST_CASE("fuzz regression: two long-text ranges expand fully and survive compress", "[hostlist][fuzz]") {
  const std::string ff3(3, '\xff');
  const std::string ff66(66, '\xff');
  const std::string a6(5, '\xa6');
  const std::string expr = "n[05]0" + ff3 + "0442" + ff66 + "1[8-448]22[8-448]22220" + a6;
  REQUIRE(regression_input("slow_two_ranges_194481_hosts") == expr);

  const std::vector<std::string> hosts = expand_hostlist(expr);
  REQUIRE(hosts.size() == 441u * 441u);
  const std::string head = "n050" + ff3 + "0442" + ff66 + "1";
  // Bytes above 0x7f are ordinary name characters: kept as they are.
  CHECK(hosts.front() == head + "822822220" + a6);
  CHECK(hosts.back() == head + "44822448" + "22220" + a6);
  CHECK(expand_hostlist(compress_hostlist(hosts)) == hosts);
}
