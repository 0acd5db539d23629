// MemoryStore and PrefixStore semantics: the same rules the server applies (StoreData).
#include <catch2/catch.hpp>

#include <thread>

#include "store/error.hpp"
#include "store/store.hpp"

using namespace ddprun::store;
using namespace std::chrono_literals;

TEST_CASE("store: set/get/add/check/del/num_keys", "[store]") {
  MemoryStore s;
  CHECK_FALSE(s.get("a", 0ms).has_value());
  s.set("a", "1");
  CHECK(s.get("a", 0ms) == "1");
  CHECK(s.add("ctr", 5) == 5);
  CHECK(s.add("ctr", -2) == 3);
  CHECK(s.get("ctr", 0ms) == "3");
  CHECK(s.check({"a", "ctr"}));
  CHECK_FALSE(s.check({"a", "nope"}));
  CHECK(s.num_keys() == 2);
  CHECK(s.del("a"));
  CHECK_FALSE(s.del("a"));
  CHECK(s.num_keys() == 1);
  s.set("text", "hello");
  CHECK_THROWS_AS(s.add("text", 1), Error);
}

TEST_CASE("store: compare_set: first writer wins, losers learn the winner", "[store]") {
  MemoryStore s;
  CHECK(s.compare_set("abort", "", "first") == "first");
  CHECK(s.compare_set("abort", "", "second") == "first");
  CHECK(s.compare_set("abort", "first", "third") == "third");
  CHECK(s.compare_set("missing", "something", "x").empty());
  CHECK_FALSE(s.check({"missing"}));
}

TEST_CASE("store: wait and wait_any wake on the write, and time out", "[store]") {
  MemoryStore s;
  CHECK_FALSE(s.wait({"k"}, 10ms));
  CHECK_FALSE(s.wait_any({"k", "j"}, 10ms).has_value());
  std::thread t([&] {
    std::this_thread::sleep_for(20ms);
    s.set("j", "x");
  });
  auto i = s.wait_any({"k", "j"}, 10s);
  t.join();
  REQUIRE(i.has_value());
  CHECK(*i == 1);
  std::thread t2([&] { s.set("k", "y"); });
  CHECK(s.wait({"k", "j"}, 10s));
  t2.join();
  CHECK(s.get("k", 10s) == "y");
}

TEST_CASE("store: PrefixStore namespaces keys per attempt", "[store]") {
  auto inner = std::make_shared<MemoryStore>();
  PrefixStore a0("/attempt_0/", inner);
  PrefixStore a1("/attempt_1/", inner);
  a0.set("abort", "x");
  CHECK(a0.check({"abort"}));
  CHECK_FALSE(a1.check({"abort"}));
  CHECK(inner->get("/attempt_0/abort", 0ms) == "x");
  CHECK(a1.add("n", 1) == 1);
  CHECK(a0.add("n", 1) == 1);
  CHECK_FALSE(a1.wait_any({"abort"}, 5ms).has_value());
  CHECK(a0.wait_any({"other", "abort"}, 5ms) == std::optional<std::size_t>(1));
  CHECK(a1.compare_set("abort", "", "y") == "y");
  CHECK(a0.get("abort", 0ms) == "x");
}
