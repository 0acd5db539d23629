// Progress without newlines, with real Python workers and the real ddprun: a tqdm-style bar redrawn
// with \r on stderr and dots printed without a newline are progress for --hang-timeout, and a bar
// reaches the agent's output while it runs, as one line per redraw interval at most when that output
// is a file.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <regex>
#include <thread>

#include "e2e/job.hpp"
#include "support/paths.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

const std::string kScript = ddprun_test::source_dir() + "/tests/e2e/bar_worker.py";

// Debian's interpreter (it has python3-tqdm; a shim in front of another would add its own silent start
// to the hang timeout's), with --hang-timeout.
std::vector<std::string> python(const std::string& hang_timeout) {
  return {"--python", "/usr/bin/python3", "--hang-timeout", hang_timeout};
}

// The lines of `text` that hold a bar redraw ("train:  42%|####      | 420/1000").
std::vector<std::string> bar_lines(const std::string& text) {
  static const std::regex bar(R"(^(\[0\]: )?train: +\d+%\|[# ]{10}\| \d+/1000$)");
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start < text.size()) {
    const auto nl = text.find('\n', start);
    const std::string line = text.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    if (std::regex_match(line, bar)) out.push_back(line);
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  return out;
}

}  // namespace

TEST_CASE("progress bar: a rank whose only output is a bar redrawn with a carriage return is never hung",
          "[e2e][bars]") {
  Job job;
  job.start(1, 1, {kScript, "bar", "4"}, python("1.5"));
  job.wait_all();
  const std::string err = job.agents[0].err();
  INFO(err);
  CHECK(job.agents[0].code == 0);
  CHECK_THAT(err, !Catch::Contains("ddprun: hang:"));
  // Its last redraw is its line once the newline came; it ran for less than the redraw interval
  // (5 s), so no earlier redraw was written.
  CHECK(bar_lines(err).size() == 1);
  CHECK(job.agents[0].out() == "done\n");
}

TEST_CASE("progress bar: dots printed without a newline are progress too", "[e2e][bars]") {
  Job job;
  job.start(1, 1, {kScript, "dots", "4"}, python("1.5"));
  job.wait_all();
  INFO(job.agents[0].err());
  CHECK(job.agents[0].code == 0);
  CHECK_THAT(job.agents[0].err(), !Catch::Contains("ddprun: hang:"));
  // The dots and the rest of their line, as one line.
  CHECK_THAT(job.agents[0].out(), Catch::Matches("\\.{10,} done\n"));
}

TEST_CASE("progress bar: a real tqdm bar is progress (Debian's python3-tqdm)", "[e2e][bars]") {
  Job job;
  job.start(1, 1, {kScript, "tqdm", "4"}, python("1.5"));
  job.wait_all();
  const std::string err = job.agents[0].err();
  INFO(err);
  if (job.agents[0].code == 77) {
    WARN("tqdm is not installed for /usr/bin/python3 (scripts/setup.sh installs python3-tqdm); skipped");
    return;
  }
  CHECK(job.agents[0].code == 0);
  CHECK_THAT(err, !Catch::Contains("ddprun: hang:") && Catch::Contains("train:"));
}

TEST_CASE("progress bar: the agent's output file gets the bar while it runs, one line per interval at most",
          "[e2e][bars]") {
  Job job;
  const auto t0 = std::chrono::steady_clock::now();
  job.start(2, 1, {kScript, "bar", "go"}, {"--python", "/usr/bin/python3"});  // rank 0's lines: a prefix
  // A redraw of rank 0's bar reaches node 0's stderr (a file) while the bar still runs: the first one
  // once the line has been open for the redraw interval (5 s).
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (bar_lines(job.agents[0].err()).empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(100ms);
  }
  const auto live = bar_lines(job.agents[0].err());
  INFO(job.agents[0].err());
  CHECK_FALSE(live.empty());
  CHECK_FALSE(std::ifstream(job.dir / "go").good());  // the bar was still running
  std::this_thread::sleep_for(6s);
  std::ofstream(job.dir / "go").put('\n');
  job.wait_all();
  const auto ran = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - t0);
  for (auto& a : job.agents) CHECK(a.code == 0);
  // Twenty redraws a second; written: at most one line per 5 s (the first after 5 s), plus the last
  // redraw once its newline came.
  const auto lines = bar_lines(job.agents[0].err());
  const auto most = static_cast<std::size_t>(ran.count() / 5 + 2);
  CHECK(lines.size() >= 2);
  CHECK(lines.size() <= most);
  for (const auto& l : lines) CHECK_THAT(l, Catch::StartsWith("[0]: train:"));
  CHECK(std::is_sorted(lines.begin(), lines.end()));  // every line a later redraw ("  9%" < " 10%")
}
