// Steps in heartbeat files (agent::parse_heartbeat_step) and --max-restarts-without-progress
// (agent::record_step, agent::after_attempt with a ProgressRule).
#include <unistd.h>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "agent/heartbeat_step.hpp"
#include "agent/result.hpp"
#include "report.hpp"

using namespace ddprun::agent;
using namespace std::string_literals;

TEST_CASE("parse_heartbeat_step: a number, or step and a number, with white space around") {
  struct Row {
    std::string text;
    std::optional<Step> step;
  };
  const std::vector<Row> rows{
      {"1200", 1200},
      {"step 1200", 1200},
      {"step 1200\n", 1200},
      {"  step\t42 \r\n", 42},
      {"0", 0},
      {"007", 7},
      {"9223372036854775807", INT64_MAX},
      {"\n1200\n", 1200},
      {"", std::nullopt},                      // a touch: alive, no step
      {" \n", std::nullopt},                   //
      {"step", std::nullopt},                  // no number
      {"step ", std::nullopt},                 //
      {"step1200", std::nullopt},              // one word
      {"Step 12", std::nullopt},               // the word is lower case
      {"-5", std::nullopt},                    // a sign
      {"+5", std::nullopt},                    //
      {"12.5", std::nullopt},                  // not an integer
      {"1e3", std::nullopt},                   //
      {"12 13", std::nullopt},                 // two numbers
      {"1200 steps", std::nullopt},            // trailing words
      {"epoch 3 step 12", std::nullopt},       // other words
      {"9223372036854775808", std::nullopt},   // past int64
      {"99999999999999999999", std::nullopt},  //
      {"12\0"s
       "34",
       std::nullopt},                              // a NUL inside
      {"\xef\xbc\x91\xef\xbc\x92", std::nullopt},  // full-width digits (UTF-8)
      {"\xff\xfe"
       "12",
       std::nullopt},            // not UTF-8
      {"12\xc3", std::nullopt},  //
  };
  for (const auto& r : rows) {
    INFO("text: " << r.text);
    CHECK(parse_heartbeat_step(r.text) == r.step);
  }
}

TEST_CASE("read_heartbeat_step: the file's step, none from missing, empty or too long files") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("ddprun-step-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name, std::ios::binary) << text;
    return (dir / name).string();
  };
  const auto a = write("a", "step 10\n");
  const auto b = write("b", "12");
  const auto empty = write("empty", "");
  const auto big = write("big", std::string(kHeartbeatReadCap, ' ') + "5");
  const auto fits = write("fits", std::string(kHeartbeatReadCap - 1, ' ') + "5");
  CHECK(read_heartbeat_step(a) == Step{10});
  CHECK(read_heartbeat_step(empty) == std::nullopt);
  CHECK(read_heartbeat_step((dir / "missing").string()) == std::nullopt);
  CHECK(read_heartbeat_step(dir.string()) == std::nullopt);  // a directory
  CHECK(read_heartbeat_step(big) == std::nullopt);
  CHECK(read_heartbeat_step(fits) == Step{5});
  CHECK(best_heartbeat_step({a, b, empty}) == Step{12});
  CHECK(best_heartbeat_step({empty, (dir / "missing").string()}) == std::nullopt);
  CHECK(best_heartbeat_step({}) == std::nullopt);
  std::filesystem::remove_all(dir);
}

namespace {
RunResult failed_at(std::optional<Step> step, int code = 1) {
  RunResult r;
  r.exit_code = code;
  Failure f;
  f.rank = 0;
  f.exit_code = code;
  f.step = step;
  r.root_cause = f;
  return r;
}

// The attempts loop's rule, attempt by attempt: the decision after each failed attempt.
std::vector<AttemptDecision> run(const std::vector<std::optional<Step>>& steps, int max_restarts, int limit) {
  ProgressRule p{limit, {}};
  std::vector<AttemptDecision> out;
  for (int attempt = 0; attempt < static_cast<int>(steps.size()); ++attempt) {
    const RunResult r = failed_at(steps[static_cast<std::size_t>(attempt)], 3);
    p.history = record_step(p.history, r.root_cause->step, attempt);
    out.push_back(after_attempt(r, attempt, max_restarts, p));
    if (!out.back().restart) break;
  }
  return out;
}
}  // namespace

TEST_CASE("record_step: a restart makes progress only with a step above every earlier attempt's") {
  struct Row {
    std::vector<std::optional<Step>> steps;
    int stalled;
    std::optional<Step> best;
  };
  const std::vector<Row> rows{
      {{5}, 0, 5},                        // the first attempt is no restart
      {{std::nullopt}, 0, std::nullopt},  //
      {{5, 5}, 1, 5},                     // the same step again
      {{5, 4}, 1, 5},                     // lower
      {{5, 6}, 0, 6},                     // higher
      {{5, std::nullopt}, 1, 5},          // no step: no progress
      {{std::nullopt, std::nullopt}, 1, std::nullopt},
      {{std::nullopt, 0}, 0, 0},  // a first step is progress
      {{5, 5, 5}, 2, 5},          //
      {{5, 5, 7, 7}, 1, 7},       // progress resets the count
      {{5, 9, 6, 8}, 2, 9},       // below the best, though above the last
  };
  for (const auto& r : rows) {
    StepHistory h;
    for (std::size_t i = 0; i < r.steps.size(); ++i) h = record_step(h, r.steps[i], static_cast<int>(i));
    CAPTURE(r.steps.size(), r.stalled);
    CHECK(h.stalled == r.stalled);
    CHECK(h.best == r.best);
    CHECK(h.last == r.steps.back());
  }
}

TEST_CASE("record_attempt: an attempt ended by a lost node neither stalls nor resets the count") {
  // Each attempt's root cause: a worker's failure at a step (or none), or a lost node ('L', no step).
  struct Row {
    std::vector<std::optional<Step>> steps;
    std::string lost;  // 'L' where that attempt ended by a lost node
    int stalled;
    std::optional<Step> best;
  };
  const std::vector<Row> rows{
      {{100, std::nullopt, std::nullopt}, ".LL", 0, 100},  // losses in a row: no restart stalled
      {{std::nullopt, std::nullopt, std::nullopt}, "LLL", 0, std::nullopt},
      {{100, std::nullopt, 100}, ".L.", 1, 100},              // the failure after a loss still counts
      {{100, 100, std::nullopt}, "..L", 1, 100},              // a loss keeps the count it found
      {{100, std::nullopt, 200}, ".L.", 0, 200},              // and progress after it resets it
      {{std::nullopt, std::nullopt}, "..", 1, std::nullopt},  // a failure without a step still stalls
  };
  for (const auto& r : rows) {
    StepHistory h;
    for (std::size_t i = 0; i < r.steps.size(); ++i) {
      Failure f;
      f.step = r.steps[i];
      f.lost = r.lost[i] == 'L';
      h = record_attempt(h, f, static_cast<int>(i));
    }
    CAPTURE(r.lost, r.stalled);
    CHECK(h.stalled == r.stalled);
    CHECK(h.best == r.best);
  }
  // The rule after the second of two losses in a row, with K = 1: restart, not 123.
  ProgressRule p{1, {}};
  RunResult lost;
  lost.exit_code = 1;
  lost.root_cause = Failure{};
  lost.root_cause->lost = true;
  lost.root_cause->exit_code = 1;
  p.history = record_attempt(p.history, lost.root_cause, 0);
  p.history = record_attempt(p.history, lost.root_cause, 1);
  const AttemptDecision d = after_attempt(lost, 1, 5, p);
  CHECK(d.restart);
  CHECK_FALSE(d.no_progress);
}

TEST_CASE("after_attempt: K restarts in a row without progress stop the job with exit 123") {
  // Fails at step 100 every time: attempt 0, then restarts 1 and 2 make no progress; K = 2 stops after 2.
  auto d = run({100, 100, 100, 100, 100}, 10, 2);
  REQUIRE(d.size() == 3);
  CHECK(d[0].restart);
  CHECK(d[1].restart);
  CHECK_FALSE(d[2].restart);
  CHECK(d[2].exit_code == kNoProgressExitCode);
  CHECK(d[2].no_progress);
  CHECK_FALSE(d[1].no_progress);

  // Progress every attempt: restarts until --max-restarts, then the failure's own code.
  d = run({10, 20, 30, 40}, 3, 1);
  REQUIRE(d.size() == 4);
  CHECK(d[2].restart);
  CHECK_FALSE(d[3].restart);
  CHECK(d[3].exit_code == 3);
  CHECK_FALSE(d[3].no_progress);

  // Off (0): the same steps restart until --max-restarts.
  d = run({100, 100, 100, 100}, 3, 0);
  REQUIRE(d.size() == 4);
  CHECK(d[3].exit_code == 3);

  // Workers that never report a step: every restart is without progress.
  d = run({std::nullopt, std::nullopt, std::nullopt}, 5, 1);
  REQUIRE(d.size() == 2);
  CHECK(d[1].exit_code == kNoProgressExitCode);

  // The last allowed restart without progress: 123, not the failure's code.
  d = run({100, 100}, 1, 1);
  REQUIRE(d.size() == 2);
  CHECK(d[1].exit_code == kNoProgressExitCode);
}

TEST_CASE("after_attempt: what ends the job anyway keeps its own code, progress or not") {
  ProgressRule p{1, {}};
  p.history.stalled = 5;
  RunResult ok;
  ok.success = true;
  CHECK(after_attempt(ok, 3, 5, p).exit_code == 0);
  RunResult sig = failed_at(1, 143);  // the agent stopped by SIGTERM is the root cause
  sig.root_cause->rank = -1;
  sig.root_cause->signal = 15;
  sig.stopped_by_signal = true;
  sig.signal = 15;
  CHECK(after_attempt(sig, 3, 5, p).exit_code == 143);
  CHECK_FALSE(after_attempt(sig, 3, 5, p).no_progress);
  // A stop after a worker's failure: the failure decides (123 here), and a decided code stands.
  RunResult late = failed_at(1, 3);
  late.stopped_by_signal = true;
  late.signal = 15;
  CHECK(after_stop(after_attempt(late, 3, 5, p), late.signal).exit_code == kNoProgressExitCode);
  RunResult ckpt = failed_at(1, 140);
  ckpt.root_cause->after_signal = 12;
  CHECK(after_attempt(ckpt, 3, 5, p).exit_code == 140);
  RunResult spawn = failed_at(std::nullopt, 127);
  spawn.spawn_failed = true;
  CHECK(after_attempt(spawn, 3, 5, p).exit_code == 127);
}

TEST_CASE("ends_without_progress: the run's own answer is the attempts loop's, and the report says 123") {
  // Every prefix of every history: the run knows what after_attempt will decide.
  for (const auto& steps : std::vector<std::vector<std::optional<Step>>>{
           {100, 100, 100}, {10, 20, 30}, {std::nullopt, std::nullopt}, {5, 9, 6, 8}}) {
    for (const int limit : {0, 1, 2}) {
      StepHistory before;
      for (int attempt = 0; attempt < static_cast<int>(steps.size()); ++attempt) {
        RunResult r = failed_at(steps[static_cast<std::size_t>(attempt)], 3);
        const bool ends = ends_without_progress(r, attempt, limit, before);
        before = record_attempt(before, r.root_cause, attempt);
        CAPTURE(attempt, limit);
        CHECK(ends == after_attempt(r, attempt, 10, ProgressRule{limit, before}).no_progress);
        r.no_progress = ends;
        CHECK(job_code(r) == (ends ? kNoProgressExitCode : 3));
      }
    }
  }
  // Attempts that lost nodes ended carry no step and are no restarts without progress: the run's
  // report never says 123 for them, as the attempts loop restarts them.
  for (const int limit : {1, 2}) {
    StepHistory before;
    for (int attempt = 0; attempt < 4; ++attempt) {
      RunResult lost = failed_at(attempt == 0 ? std::optional<Step>(100) : std::nullopt, 1);
      lost.root_cause->lost = attempt > 0;
      const bool ends = ends_without_progress(lost, attempt, limit, before);
      before = record_attempt(before, lost.root_cause, attempt);
      CAPTURE(attempt, limit);
      CHECK(ends == after_attempt(lost, attempt, 10, ProgressRule{limit, before}).no_progress);
      CHECK_FALSE(ends);
    }
  }
  // Its report's header and table say the job's code; the root cause keeps the run's own.
  RunResult r = failed_at(100, 3);
  r.no_progress = true;
  CHECK_THAT(format_report(r),
             Catch::StartsWith("ddprun: job failed with exit code 123 (attempt 0, node 0, host ") &&
                 Catch::Contains("  exit code : 3\n"));
  CHECK_THAT(format_summary(r),
             Catch::StartsWith("ddprun: summary (attempt 0, node 0): FAILED, exit code 123\n"));
}

TEST_CASE("no_progress_line names the limit, the last step and the best") {
  ProgressRule p{2, {}};
  p.history = record_step(p.history, 1200, 0);
  p.history = record_step(p.history, 1200, 1);
  p.history = record_step(p.history, 1100, 2);
  CHECK(no_progress_line(p) ==
        "no progress in 2 restarts in a row (--max-restarts-without-progress 2): the last attempt failed at "
        "step 1100, the best step is 1200; stopping with exit code 123");
  ProgressRule none{1, {}};
  none.history = record_step(none.history, std::nullopt, 0);
  none.history = record_step(none.history, std::nullopt, 1);
  CHECK(no_progress_line(none) ==
        "no progress in 1 restart in a row (--max-restarts-without-progress 1): the last attempt reported no "
        "step, no attempt reported a step; stopping with exit code 123");
}
