// Hostlist grammar (Slurm 23.02.5+), compression for display, and count lists.
#include <catch2/catch.hpp>

#include <cctype>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/hostlist.hpp"

using Catch::Matchers::Contains;
using ddprun::core::compress_hostlist;
using ddprun::core::Error;
using ddprun::core::expand_hostlist;
using ddprun::core::parse_count_list;
using Hosts = std::vector<std::string>;

namespace {

std::string hostlist_error(const std::string& expr) {
  try {
    const Hosts hosts = expand_hostlist(expr);
    return "<no error; " + std::to_string(hosts.size()) + " hosts>";
  } catch (const Error& e) {
    return e.what();
  }
}

// The message names the expression and the 0-based position, says what is wrong, and fits one line.
void check_hostlist_error(const std::string& expr, std::size_t pos, const std::string& what) {
  INFO("expression: " << expr);
  const std::string msg = hostlist_error(expr);
  CHECK_THAT(msg, Contains("\"" + expr + "\"") && Contains("position " + std::to_string(pos) + ":") &&
                      Contains(what) && Contains(";"));
  CHECK(msg.find('\n') == std::string::npos);
}

std::string count_list_error(const std::string& s) {
  try {
    const std::vector<int> counts = parse_count_list(s);
    return "<no error; " + std::to_string(counts.size()) + " counts>";
  } catch (const Error& e) {
    return e.what();
  }
}

}  // namespace

TEST_CASE("hostlist: Slurm's own examples", "[hostlist]") {
  CHECK(expand_hostlist("host[1-3],host5") == Hosts{"host1", "host2", "host3", "host5"});
  CHECK(expand_hostlist("rack[0-1]_blade[2,3]") ==
        Hosts{"rack0_blade2", "rack0_blade3", "rack1_blade2", "rack1_blade3"});
  CHECK(expand_hostlist("node0,node3,node4,node8,linux,linux2,linux5,node4") ==
        Hosts{"node0", "node3", "node4", "node8", "linux", "linux2", "linux5", "node4"});
}

TEST_CASE("hostlist: several brackets expand in Slurm's order", "[hostlist]") {
  // Last bracket fastest; of the earlier ones the right-most is the outer loop (checked against libslurm).
  CHECK(expand_hostlist("row[0,1]_rack[2-3]_blade[4,5]") ==
        Hosts{"row0_rack2_blade4", "row0_rack2_blade5", "row1_rack2_blade4", "row1_rack2_blade5",
              "row0_rack3_blade4", "row0_rack3_blade5", "row1_rack3_blade4", "row1_rack3_blade5"});
  CHECK(expand_hostlist("rack[1-2]-node[01-03]") == Hosts{"rack1-node01", "rack1-node02", "rack1-node03",
                                                          "rack2-node01", "rack2-node02", "rack2-node03"});
  // Four brackets: c is outermost, then b, then a, and d fastest (as libslurm 22.05).
  CHECK(expand_hostlist("a[1-2]b[3-4]c[5-6]d[7-8]") == Hosts{"a1b3c5d7", "a1b3c5d8", "a2b3c5d7", "a2b3c5d8",
                                                             "a1b4c5d7", "a1b4c5d8", "a2b4c5d7", "a2b4c5d8",
                                                             "a1b3c6d7", "a1b3c6d8", "a2b3c6d7", "a2b3c6d8",
                                                             "a1b4c6d7", "a1b4c6d8", "a2b4c6d7", "a2b4c6d8"});
  // Adjacent brackets concatenate their numbers.
  CHECK(expand_hostlist("a[1-2][3-4]") == Hosts{"a13", "a14", "a23", "a24"});
}

TEST_CASE("hostlist: text after a bracket", "[hostlist]") {
  CHECK(expand_hostlist("gpu-a[1-2]-ib") == Hosts{"gpu-a1-ib", "gpu-a2-ib"});
  CHECK(expand_hostlist("r[1-2]n[3,4].ib0") == Hosts{"r1n3.ib0", "r1n4.ib0", "r2n3.ib0", "r2n4.ib0"});
  CHECK(expand_hostlist("[1-3]") == Hosts{"1", "2", "3"});
}

TEST_CASE("hostlist: zero padding follows the width of lo", "[hostlist]") {
  CHECK(expand_hostlist("node[08-10]") == Hosts{"node08", "node09", "node10"});
  CHECK(expand_hostlist("n[8-010]") == Hosts{"n8", "n9", "n10"});
  CHECK(expand_hostlist("x[01,1,001]") == Hosts{"x01", "x1", "x001"});
  CHECK(expand_hostlist("n[098-101]") == Hosts{"n098", "n099", "n100", "n101"});
  CHECK(expand_hostlist("n[0,00]") == Hosts{"n0", "n00"});
  CHECK(expand_hostlist("n[18446744073709551615]") == Hosts{"n18446744073709551615"});
}

TEST_CASE("hostlist: names without digits, with dashes and dots", "[hostlist]") {
  CHECK(expand_hostlist("login") == Hosts{"login"});
  CHECK(expand_hostlist("gpu-node.cluster.example,a-b-c") == Hosts{"gpu-node.cluster.example", "a-b-c"});
  CHECK(expand_hostlist("n-1,-x,x-") == Hosts{"n-1", "-x", "x-"});  // '-' outside brackets is text
}

TEST_CASE("hostlist: separators", "[hostlist]") {
  CHECK(expand_hostlist("a b\tc\nd,e") == Hosts{"a", "b", "c", "d", "e"});
  CHECK(expand_hostlist(" ,, a ,, n[1,2] ,") == Hosts{"a", "n1", "n2"});  // empty items ignored
  CHECK(expand_hostlist("a[1-2] , b") == Hosts{"a1", "a2", "b"});
  CHECK(expand_hostlist("").empty());
  CHECK(expand_hostlist(" , \t").empty());
}

TEST_CASE("hostlist: the largest range and expansion allowed", "[hostlist]") {
  const Hosts hosts = expand_hostlist("a[0-65535]");
  REQUIRE(hosts.size() == ddprun::core::kMaxRangeHosts);
  CHECK(hosts.front() == "a0");
  CHECK(hosts.back() == "a65535");
  CHECK(expand_hostlist("a[0-15]b[0-65535]").size() == ddprun::core::kMaxTotalHosts);
}

TEST_CASE("hostlist: errors name the expression, the position and the problem", "[hostlist]") {
  check_hostlist_error("node[3-1]", 5, "lo > hi");
  check_hostlist_error("node[1-b]", 7, "'b' inside brackets");
  check_hostlist_error("node[a-3]", 5, "'a' inside brackets");
  check_hostlist_error("node[1,x2]", 7, "'x' inside brackets");
  check_hostlist_error("node[-1]", 5, "starts with '-'");
  check_hostlist_error("node[]", 4, "empty brackets");
  check_hostlist_error("a,node[1-3", 6, "missing ']'");
  check_hostlist_error("node[", 4, "missing ']'");
  check_hostlist_error("node[1-", 4, "missing ']'");
  check_hostlist_error("node[1-3 ,b]", 8, "whitespace inside brackets");
  check_hostlist_error("node1]", 5, "']' without a matching '['");
  check_hostlist_error("n[1-2]],b", 6, "']' without a matching '['");
  check_hostlist_error("node[1[2]]", 6, "nested '['");
  check_hostlist_error("node[1-[2]]", 7, "nested '['");
  check_hostlist_error("node[0-65536]", 5, "more than 65536 hosts");
  check_hostlist_error("x,node[5-70000]", 7, "more than 65536 hosts");
  check_hostlist_error("a[1,,2]", 4, "empty element");
  check_hostlist_error("a[,1]", 2, "empty element");
  check_hostlist_error("a[1,]", 4, "empty element");
  check_hostlist_error("a[1-]", 4, "no upper bound");
  check_hostlist_error("a[1-2-3]", 5, "extra '-'");
  check_hostlist_error("a[+1]", 2, "'+' inside brackets");
  check_hostlist_error("a[18446744073709551616]", 2, "number too large");
  check_hostlist_error("x a[0-65535]b[0-65535]", 2, "more than 1048576 hosts");
  check_hostlist_error("a[0-65535]b[0-16]", 0, "more than 1048576 hosts");
  // Bytes, not just hosts: 2^20 hosts with 100-character names is 100 MiB.
  check_hostlist_error(std::string(90, 'p') + "[0-15]b[0-65535]", 0, "bytes of host names");
}

TEST_CASE("hostlist: hosts are capped across items too", "[hostlist]") {
  std::string expr;
  for (int i = 0; i < 17; ++i) expr += "n" + std::to_string(i) + "x[0-65535],";
  const std::string msg = hostlist_error(expr);
  CHECK_THAT(msg, Contains("more than 1048576 hosts") && Contains("position 214:"));
}

TEST_CASE("hostlist: error messages stay on one line and show long input as a window", "[hostlist]") {
  const std::string msg = hostlist_error("a\nb\x01");
  CHECK_THAT(msg, Contains("\"a\\nb\\x01\"") && Contains("position 3:") && Contains("control character"));
  CHECK(msg.find('\n') == std::string::npos);

  const std::string long_expr = std::string(500, 'a') + "[9-1]" + std::string(500, 'b');
  const std::string long_msg = hostlist_error(long_expr);
  CHECK_THAT(long_msg, Contains("position 501:") && Contains("aaa[9-1]bbb") && Contains("..."));
  CHECK(long_msg.size() < 400);
}

TEST_CASE("compress_hostlist folds trailing numbers without sorting or dedup", "[hostlist]") {
  CHECK(compress_hostlist({"n01", "n02", "n03", "m"}) == "n[01-03],m");
  CHECK(compress_hostlist({"node0", "node3", "node4", "node8", "linux", "linux2", "linux5", "node4"}) ==
        "node[0,3-4,8],linux,linux[2,5],node4");
  CHECK(compress_hostlist({"n8", "n9", "n10"}) == "n[8-10]");
  CHECK(compress_hostlist({"n09", "n10"}) == "n[09-10]");
  CHECK(compress_hostlist({"n9", "n010"}) == "n[9,010]");
  CHECK(compress_hostlist({"x01", "x1", "x001"}) == "x[01,1,001]");
  CHECK(compress_hostlist({"n3", "n2", "n1"}) == "n[3,2,1]");
  CHECK(compress_hostlist({"n1", "n1"}) == "n[1,1]");
  CHECK(compress_hostlist({"n5"}) == "n5");
  CHECK(compress_hostlist({"rack1_blade2", "rack1_blade3"}) == "rack1_blade[2-3]");
  CHECK(compress_hostlist({"1", "2", "3"}) == "[1-3]");
  CHECK(compress_hostlist({"n18446744073709551614", "n18446744073709551615"}) ==
        "n[18446744073709551614-18446744073709551615]");
  // A number beyond 64 bits is kept as text.
  CHECK(compress_hostlist({"n18446744073709551616", "n18446744073709551617"}) ==
        "n18446744073709551616,n18446744073709551617");
  CHECK(compress_hostlist({}).empty());
}

TEST_CASE("compress_hostlist keeps each range within what expand accepts", "[hostlist]") {
  Hosts hosts;
  for (int i = 0; i < 70000; ++i) hosts.push_back("n" + std::to_string(i));
  const std::string compressed = compress_hostlist(hosts);
  CHECK(compressed == "n[0-65535,65536-69999]");
  CHECK(expand_hostlist(compressed) == hosts);
}

TEST_CASE("compress_hostlist rejects names it cannot write", "[hostlist]") {
  for (const std::string bad : {"a b", "a,b", "n[1]", "x]", "a\tb", ""}) {
    INFO("name: " << bad);
    CHECK_THROWS_AS(compress_hostlist({"ok1", bad}), Error);
  }
  CHECK_THROWS_WITH(compress_hostlist({"ok1", "a,b"}), Contains("\"a,b\"") && Contains("index 1"));
}

TEST_CASE("compress then expand gives back the list (fixed-seed random lists)", "[hostlist]") {
  std::mt19937_64 rng(20260522);
  auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  const std::vector<std::string> prefixes = {"", "n", "node-", "a.b", "x1y", "rack0_blade", "gpu", "-", "9z"};
  for (int round = 0; round < 2000; ++round) {
    Hosts hosts;
    const std::size_t runs = 1 + pick(6);
    for (std::size_t r = 0; r < runs; ++r) {
      const std::string& prefix = prefixes[pick(prefixes.size())];
      if (pick(8) == 0) {  // a name with no trailing number
        hosts.push_back(prefix.empty() || std::isdigit(static_cast<unsigned char>(prefix.back()))
                            ? prefix + "z"
                            : prefix);
        continue;
      }
      std::uint64_t value = pick(4) == 0 ? rng() : pick(120);
      const std::size_t width = pick(4);
      const std::size_t length = 1 + pick(12);
      for (std::size_t k = 0; k < length; ++k) {
        std::string digits = std::to_string(value);
        if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
        hosts.push_back(prefix + digits);
        // Mostly count up; sometimes repeat, jump or go down, to exercise every fold decision.
        switch (pick(6)) {
          case 0:
            break;
          case 1:
            value += 2 + pick(3);
            break;
          case 2:
            value = value > 0 ? value - 1 : 0;
            break;
          default:
            ++value;
            break;
        }
      }
    }
    INFO("hosts[0]: " << hosts.front() << ", " << hosts.size() << " hosts");
    const std::string compressed = compress_hostlist(hosts);
    INFO("compressed: " << compressed);
    REQUIRE(expand_hostlist(compressed) == hosts);
  }
}

TEST_CASE("parse_count_list expands repeats", "[hostlist][count]") {
  CHECK(parse_count_list("2(x3),1") == std::vector<int>{2, 2, 2, 1});
  CHECK(parse_count_list("4") == std::vector<int>{4});
  CHECK(parse_count_list("3,1") == std::vector<int>{3, 1});
  CHECK(parse_count_list("1(x2)") == std::vector<int>{1, 1});
  CHECK(parse_count_list("8(x1),16(x2),0") == std::vector<int>{8, 16, 16, 0});
}

TEST_CASE("parse_count_list rejects malformed input", "[hostlist][count]") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "position 0: empty"},
      {",", "position 0: count expected"},
      {"2,", "position 2: count missing at end"},
      {"a", "position 0: count expected"},
      {"-1", "position 0: negative count"},
      {"2(x0)", "position 1: repeat of zero"},
      {"2(x-1)", "position 3: negative repeat"},
      {"2(3)", "position 2: 'x' expected"},
      {"2(x3", "position 4: ')' expected"},
      {"2x3", "position 1: 'x' unexpected"},
      {"2 ,1", "position 1: ' ' unexpected"},
      {"99999999999", "position 0: count too large"},
      {"1(x2000000)", "more than 1048576 entries"},
  };
  for (const auto& [input, expected] : cases) {
    INFO("input: " << input);
    const std::string msg = count_list_error(input);
    CHECK_THAT(msg, Contains("\"" + input + "\"") && Contains(expected));
  }
}
