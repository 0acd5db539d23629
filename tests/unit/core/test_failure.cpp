// The failure record every layer shares: its codec, its precision, and which root causes end a job.
#include <catch2/catch.hpp>
#include <csignal>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/failure.hpp"
#include "core/json.hpp"

using namespace ddprun::core;

namespace {
Failure sample() {
  Failure f;
  f.host = "node7";
  f.node_rank = 2;
  f.rank = 5;
  f.local_rank = 1;
  f.exit_code = 139;
  f.signal = SIGSEGV;
  f.pid = 4242;
  f.reason = "killed by SIGSEGV";
  f.time = FailureTime(std::chrono::microseconds(1'763'000'000'123'457LL));
  f.stderr_tail = {"line 1", "line 2"};
  return f;
}
}  // namespace

TEST_CASE("failure: the wire form round-trips every field at microsecond precision", "[failure]") {
  const Failure f = sample();
  const Failure g = decode_failure(encode_failure(f));
  CHECK(g.host == f.host);
  CHECK(g.node_rank == 2);
  CHECK(g.rank == 5);
  CHECK(g.local_rank == 1);
  CHECK(g.exit_code == 139);
  CHECK(g.signal == SIGSEGV);
  CHECK(g.pid == 4242);
  CHECK(g.reason == f.reason);
  CHECK(g.time == f.time);  // the same instant on every node: root-cause choice compares these
  CHECK(g.stderr_tail == f.stderr_tail);
  CHECK_FALSE(g.fatal);
  Failure fatal = f;
  fatal.fatal = true;
  CHECK(decode_failure(encode_failure(fatal)).fatal);
  CHECK(g.after_signal == 0);
  Failure on_request = f;
  on_request.after_signal = SIGUSR2;
  CHECK(decode_failure(encode_failure(on_request)).after_signal == SIGUSR2);
}

TEST_CASE("failure: a Python exception and traceback travel with the record", "[failure]") {
  Failure f = sample();
  f.error_message = "ValueError: distinctive-message";
  f.traceback = "Traceback (most recent call last):\n  File \"t.py\", line 3, in main\n";
  const Failure g = decode_failure(encode_failure(f));
  CHECK(g.error_message == f.error_message);
  CHECK(g.traceback == f.traceback);
  // 16 KB, all of it escaped (control bytes take six), stays far below the store's value limit.
  f.traceback = std::string(kPythonErrorCap, '\x01');
  CHECK(encode_failure(f).size() < 7 * kPythonErrorCap);
  CHECK(decode_failure(encode_failure(f)).traceback == f.traceback);
}

TEST_CASE("failure: records without the Python fields (older versions) still decode", "[failure]") {
  nlohmann::json j = failure_to_json(sample());
  CHECK(j.at("error_message").is_null());  // empty is null in the JSON
  CHECK(j.at("traceback").is_null());
  j.erase("error_message");
  j.erase("traceback");
  const Failure g = decode_failure(dump_json(j));
  CHECK(g.error_message.empty());
  CHECK(g.traceback.empty());
  CHECK(g.rank == 5);
  j["traceback"] = 42;  // a wrong type is malformed, as for every other field
  CHECK_THROWS_AS(decode_failure(dump_json(j)), Error);
}

TEST_CASE("failure: now() is already at the record's precision, so a round trip never reorders",
          "[failure]") {
  const Failure a = [] {
    Failure f = sample();
    f.time = failure_now();
    return f;
  }();
  CHECK(decode_failure(encode_failure(a)).time == a.time);
}

TEST_CASE("failure: bytes that are not UTF-8 never break the encoding", "[failure]") {
  Failure f = sample();
  f.stderr_tail = {std::string("bad utf8: \xff\xfe"), std::string("\xc3")};
  f.reason = std::string("exited \x80 oddly");
  f.host = std::string("h\xff");
  std::string text;
  REQUIRE_NOTHROW(text = encode_failure(f));
  const Failure g = decode_failure(text);
  CHECK(g.stderr_tail.size() == 2);
  CHECK(g.exit_code == 139);
  CHECK(dump_json(nlohmann::json(std::string("\xff"))) == "\"\xef\xbf\xbd\"");
  // The stderr lines arrive as they were written, so another node's report shows \xNN like its own.
  CHECK(g.stderr_tail == f.stderr_tail);
  // The JSON of the report (failure_to_json, events, error files) replaces them, as for a local one.
  CHECK(dump_json(failure_to_json(g)).find("bad utf8: \xef\xbf\xbd\xef\xbf\xbd") != std::string::npos);
}

TEST_CASE("failure: a record whose stderr bytes are malformed is a malformed record", "[failure]") {
  Failure f = sample();
  f.stderr_tail = {"x"};
  auto j = failure_to_json(f);
  for (const auto& bad : {nlohmann::json{{"1", "ff"}}, nlohmann::json{{"0", "f"}},
                          nlohmann::json{{"x", "ff"}}, nlohmann::json{{"0", 5}}}) {
    j["stderr_tail_hex"] = bad;
    INFO(bad.dump());
    CHECK_THROWS_WITH(decode_failure(dump_json(j)), Catch::Contains("malformed failure record"));
  }
  j["stderr_tail_hex"] = {{"0", "ff"}};
  CHECK(decode_failure(dump_json(j)).stderr_tail == std::vector<std::string>{"\xff"});
}

TEST_CASE("failure: a malformed record is one clear error", "[failure]") {
  CHECK_THROWS_AS(decode_failure("{not json"), Error);
  CHECK_THROWS_AS(decode_failure(R"({"host":"x"})"), Error);
  try {
    decode_failure("[]");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("malformed failure record") != std::string::npos);
    CHECK(e.exit_code() == 1);
  }
}

TEST_CASE("failure: a number that no int holds is a malformed record, not a cast", "[failure]") {
  // A record comes from another node: json reads 1e70 or 2^40 as a number, and casting it to int
  // would be undefined behaviour (the fuzzer's find).
  const std::string good = encode_failure(sample());
  REQUIRE(decode_failure(good).node_rank == sample().node_rank);
  const std::pair<const char*, const char*> table[] = {
      {"node_rank", "77777777777777777777777777777777777777777777777777771"},  // a float out of range
      {"node_rank", "1099511627776"},                                          // 2^40: an int64, not an int
      {"rank", "18446744073709551615"},                                        // a uint64
      {"exit_code", "1.5"},                                                    // a float in range
      {"signal", "true"},                                                      // a bool
      {"after_signal", "-1e300"},
  };
  for (const auto& [key, value] : table) {
    nlohmann::json j = nlohmann::json::parse(good);
    j[key] = nlohmann::json::parse(value);
    INFO(key << " = " << value);
    try {
      decode_failure(dump_json(j));
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("malformed failure record") != std::string::npos);
      CHECK(std::string(e.what()).find("expected an integer") != std::string::npos);
    }
  }
}

TEST_CASE("failure: which root causes end the job whatever --max-restarts says", "[failure]") {
  struct Row {
    int rank;
    int signal;
    bool fatal;
    int after_signal;
    bool ends;
  };
  const Row table[] = {
      {3, 0, false, 0, false},             // a worker exited non-zero: restartable
      {3, SIGSEGV, false, 0, false},       // a worker crashed: restartable
      {-1, SIGTERM, false, 0, true},       // the agent was stopped (scancel, time limit)
      {-1, 0, false, 0, false},            // a lost agent: restartable
      {0, 0, true, 0, true},               // the command cannot start
      {3, 0, false, SIGUSR2, true},        // a worker stopped after a checkpoint signal (exit 140)
      {3, SIGSEGV, false, SIGUSR1, true},  // any exit within that grace counts as the stop
  };
  for (const auto& row : table) {
    Failure f;
    f.rank = row.rank;
    f.signal = row.signal;
    f.fatal = row.fatal;
    f.after_signal = row.after_signal;
    INFO("rank " << row.rank << " signal " << row.signal << " fatal " << row.fatal << " after "
                 << row.after_signal);
    CHECK(ends_job(f) == row.ends);
  }
  CHECK(signal_name(SIGKILL) == "SIGKILL");
  CHECK(signal_name(0) == "signal 0");
}

TEST_CASE(
    "failure: signal names are glibc's, from a table of our own (the portable build's glibc 2.28 has no "
    "sigabbrev_np)",
    "[failure]") {
  for (int sig = 1; sig < SIGRTMIN; ++sig) {
    INFO("signal " << sig);
    const char* glibc =
        sigabbrev_np(sig);  // glibc 2.32+: this Debian build has it, the portable one does not
    CHECK(signal_name(sig) ==
          (glibc != nullptr ? std::string("SIG") + glibc : "signal " + std::to_string(sig)));
  }
  CHECK(signal_name(SIGRTMIN) == "signal " + std::to_string(SIGRTMIN));
  CHECK(signal_name(-3) == "signal -3");
}

TEST_CASE("failure: a hang travels with its silent ranks, and stays restartable", "[failure]") {
  Failure f = sample();
  f.exit_code = kHangExitCode;
  f.signal = 0;
  f.hang = true;
  f.silent = {{1, 3.25}, {3, 4.5}};
  const Failure g = decode_failure(encode_failure(f));
  CHECK(g.hang);
  CHECK(g.exit_code == 124);
  REQUIRE(g.silent.size() == 2);
  CHECK(g.silent[1].rank == 3);
  CHECK(g.silent[1].silent_s == 4.5);
  CHECK_FALSE(ends_job(g));  // a hang is a failure like any other: --max-restarts may retry it
  // A record from an agent that knows no hangs decodes as no hang.
  auto j = failure_to_json(sample());
  j.erase("hang");
  j.erase("silent");
  CHECK_FALSE(failure_from_json(j).hang);
  // A malformed silent list is the one clear error, never a crash.
  for (const char* bad : {R"([{"rank":"x","silent_s":1}])", R"(5)", R"([{"silent_s":1}])", R"({"a":1})"}) {
    auto k = failure_to_json(f);
    k["silent"] = nlohmann::json::parse(bad);
    INFO(bad);
    CHECK_THROWS_AS(failure_from_json(k), Error);
  }
}
