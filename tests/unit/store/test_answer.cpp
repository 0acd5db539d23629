// answer(): the store server's reply to each request, from the data alone (no sockets).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "store/answer.hpp"

using namespace ddprun::store;
using proto::Op;
using proto::Status;

namespace {

proto::Request req(Op op, std::string key = {}, std::string value = {}) {
  proto::Request q;
  q.op = op;
  q.key = std::move(key);
  q.value = std::move(value);
  return q;
}

proto::Request with_timeout(proto::Request q, std::uint64_t ms) {
  q.timeout_ms = ms;
  return q;
}

proto::Request with_keys(Op op, std::vector<std::string> keys, std::uint64_t timeout_ms = 0) {
  proto::Request q = req(op);
  q.keys = std::move(keys);
  q.timeout_ms = timeout_ms;
  return q;
}

proto::Request add(std::string key, std::int64_t delta) {
  proto::Request q = req(Op::add, std::move(key));
  q.number = delta;
  return q;
}

proto::Request compare_set(std::string key, std::string expected, std::string desired) {
  proto::Request q = req(Op::compare_set, std::move(key), std::move(expected));
  q.value2 = std::move(desired);
  return q;
}

struct Row {
  const char* what;
  proto::Request q;
  Status status;
  std::int64_t number;
  std::string value;    // for error replies: a part of the message
  const char* changed;  // the key whose waiters may wake, or nullptr
  bool ready;           // ready() before the request is applied
};

}  // namespace

TEST_CASE("answer: a table of requests against one store in order", "[answer]") {
  // Each row runs against the data the rows before it left.
  const std::vector<Row> rows = {
      {"get, missing, no timeout", req(Op::get, "a"), Status::not_found, 0, "", nullptr, false},
      {"get, missing, after its wait", with_timeout(req(Op::get, "a"), 100), Status::timeout, 0, "", nullptr,
       false},
      {"set", req(Op::set, "a", "1"), Status::ok, 0, "", "a", true},
      {"get", req(Op::get, "a"), Status::ok, 0, "1", nullptr, true},
      {"get with a timeout, present", with_timeout(req(Op::get, "a"), 100), Status::ok, 0, "1", nullptr,
       true},
      {"add to a missing key starts at 0", add("ctr", 5), Status::ok, 5, "", "ctr", true},
      {"add a negative delta", add("ctr", -2), Status::ok, 3, "", "ctr", true},
      {"set text", req(Op::set, "text", "hello"), Status::ok, 0, "", "text", true},
      {"add on text is an error, nothing changes", add("text", 1), Status::error, 0, "not an integer",
       nullptr, true},
      {"compare_set on a missing key with \"\" writes", compare_set("abort", "", "first"), Status::ok, 1,
       "first", "abort", true},
      {"compare_set loses: the winner comes back", compare_set("abort", "", "second"), Status::ok, 0, "first",
       nullptr, true},
      {"compare_set with the right expected value writes", compare_set("abort", "first", "third"), Status::ok,
       1, "third", "abort", true},
      {"compare_set on a missing key with an expected value", compare_set("none", "x", "y"), Status::ok, 0,
       "", nullptr, true},
      {"check, all present", with_keys(Op::check, {"a", "ctr"}), Status::ok, 1, "", nullptr, true},
      {"check, one missing", with_keys(Op::check, {"a", "none"}), Status::ok, 0, "", nullptr, true},
      {"wait, all present", with_keys(Op::wait, {"a", "ctr"}, 100), Status::ok, 0, "", nullptr, true},
      {"wait, one missing, no timeout", with_keys(Op::wait, {"a", "none"}), Status::timeout, 0, "", nullptr,
       false},
      {"wait, one missing, after its wait", with_keys(Op::wait, {"a", "none"}, 100), Status::timeout, 0, "",
       nullptr, false},
      {"wait_any: the index of the first present key", with_keys(Op::wait_any, {"none", "ctr", "a"}, 100),
       Status::ok, 1, "", nullptr, true},
      {"wait_any, none present", with_keys(Op::wait_any, {"none", "nope"}), Status::timeout, 0, "", nullptr,
       false},
      {"wait_any, no keys", with_keys(Op::wait_any, {}, 100), Status::timeout, 0, "", nullptr, false},
      {"num_keys", req(Op::num_keys), Status::ok, 4, "", nullptr, true},
      {"del, present", req(Op::del, "a"), Status::ok, 1, "", nullptr, true},
      {"del, missing", req(Op::del, "a"), Status::ok, 0, "", nullptr, true},
      {"num_keys after del", req(Op::num_keys), Status::ok, 3, "", nullptr, true},
      {"ping", req(Op::ping), Status::ok, 0, "", nullptr, true},
  };
  StoreData data;
  for (const auto& row : rows) {
    INFO(row.what);
    CHECK(ready(data, row.q) == row.ready);
    const Answer a = answer(data, row.q);
    CHECK(a.reply.status == row.status);
    CHECK(a.reply.number == row.number);
    if (row.status == Status::error) {
      CHECK_THAT(a.reply.value, Catch::Contains(row.value));
    } else {
      CHECK(a.reply.value == row.value);
    }
    CHECK(a.changed.has_value() == (row.changed != nullptr));
    if (row.changed && a.changed) CHECK(*a.changed == row.changed);
  }
}

TEST_CASE("answer: only a get/wait/wait_any with a timeout and missing keys must wait", "[answer]") {
  StoreData data;
  data.set("here", "v");
  CHECK(must_wait(data, with_timeout(req(Op::get, "gone"), 1)));
  CHECK_FALSE(must_wait(data, req(Op::get, "gone")));  // answers not_found at once
  CHECK_FALSE(must_wait(data, with_timeout(req(Op::get, "here"), 1)));
  CHECK(must_wait(data, with_keys(Op::wait, {"here", "gone"}, 1)));
  CHECK_FALSE(must_wait(data, with_keys(Op::wait, {"here", "gone"}, 0)));
  CHECK_FALSE(must_wait(data, with_keys(Op::wait, {"here"}, 1)));
  CHECK(must_wait(data, with_keys(Op::wait_any, {"gone"}, 1)));
  CHECK_FALSE(must_wait(data, with_keys(Op::wait_any, {"gone", "here"}, 1)));
  CHECK_FALSE(must_wait(data, with_keys(Op::check, {"gone"}, 1)));
  // The write that makes it ready names the key its waiters are filed under.
  const auto q = with_timeout(req(Op::get, "gone"), 1);
  const Answer a = answer(data, req(Op::set, "gone", "now"));
  REQUIRE(a.changed);
  CHECK(*a.changed == "gone");
  CHECK(ready(data, q));
  CHECK(answer(data, q).reply.value == "now");
}
