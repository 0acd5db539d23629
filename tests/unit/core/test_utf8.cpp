// UTF-8 in worker output (core/utf8.hpp) and what a terminal shows of a redrawn line.
#include <catch2/catch.hpp>

#include "core/status.hpp"
#include "core/utf8.hpp"

using namespace ddprun::core;

TEST_CASE("utf8: sequences, validity and a character cut by the end of a read") {
  struct Row {
    std::string in;
    bool valid;
    std::string whole;  // without_cut_character
  };
  const std::vector<Row> rows = {
      {"", true, ""},
      {"abc", true, "abc"},
      {"\xE2\x82\xAC", true, "\xE2\x82\xAC"},  // the euro sign, whole
      {"a\xE2\x82", false, "a"},               // cut after two of its three bytes
      {"a\xE2", false, "a"},                   // after one
      {"a\xF0\x9F\x98", false, "a"},           // a four-byte one cut after three
      {"a\xF0\x9F\x98\x80", true, "a\xF0\x9F\x98\x80"},
      {"a\xFF", false, "a\xFF"},                // not UTF-8 at all: kept, it will never be whole
      {"a\xE2\x41", false, "a\xE2\x41"},        // a broken sequence, not a cut one
      {"\xC0\xAF", false, "\xC0\xAF"},          // overlong
      {"\xED\xA0\x80", false, "\xED\xA0\x80"},  // a surrogate
      {"a\xC3", false, "a"},
  };
  for (const auto& r : rows) {
    INFO(to_hex(r.in));
    CHECK(valid_utf8(r.in) == r.valid);
    CHECK(std::string(without_cut_character(r.in)) == r.whole);
  }
  CHECK(utf8_length("\xE2\x82\xAC", 0) == 3);
  CHECK(utf8_length("\xE2\x82", 0) == 0);
  CHECK(utf8_length("x", 1) == 0);
}

TEST_CASE("utf8: hex round trip of any bytes") {
  const std::string bytes("a\x00\xFF\x80z", 5);
  CHECK(to_hex(bytes) == "6100ff807a");
  std::string back;
  REQUIRE(from_hex("6100FF807a", back));
  CHECK(back == bytes);
  CHECK_FALSE(from_hex("abc", back));
  CHECK_FALSE(from_hex("zz", back));
  CHECK(back == bytes);  // left as it was
}

TEST_CASE("visible_part: the text after the last carriage return that has text after it") {
  CHECK(visible_part("plain") == "plain");
  CHECK(visible_part("10%\r20%") == "20%");
  CHECK(visible_part("\r20%") == "20%");
  CHECK(visible_part("20%\r") == "20%");
  CHECK(visible_part("a\rb\r\r") == "b");
  CHECK(visible_part("\r\r").empty());
}
