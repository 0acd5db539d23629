// `ddprun top`'s status record: its codec, the last-line cleaning, /proc parsing, the CPU share and
// the publication interval (core/status.hpp).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/status.hpp"

using namespace ddprun::core;

namespace {

NodeStatus sample() {
  NodeStatus s;
  s.node_rank = 1;
  s.host = "gpu-node-0002";
  s.agent_state = "running";
  s.published_ms = 1764200000123;
  s.attempt = 2;
  s.world_size = 16;
  s.nnodes = 2;
  s.elastic_events = 1;
  RankStatus a;
  a.rank = 8;
  a.local_rank = 0;
  a.pid = 4242;
  a.state = RankState::running;
  a.run_seconds = 12.34;
  a.last_line = "step 100 loss 0.25";
  a.progress_age = 0.46;
  a.rss_bytes = 123456789;
  a.cpu_percent = 99.94;
  a.restarts = 2;
  RankStatus b;
  b.rank = 9;
  b.local_rank = 1;
  b.pid = 4243;
  b.state = RankState::exited;
  b.exit_code = 7;
  b.run_seconds = 3;
  s.ranks = {a, b};
  return s;
}

}  // namespace

TEST_CASE("status record: every field survives the codec, seconds to a tenth") {
  const NodeStatus s = sample();
  const NodeStatus d = decode_node_status(encode_node_status(s));
  CHECK(d.node_rank == 1);
  CHECK(d.host == "gpu-node-0002");
  CHECK(d.agent_state == "running");
  CHECK(d.published_ms == 1764200000123);
  CHECK(d.attempt == 2);
  CHECK(d.world_size == 16);
  CHECK(d.nnodes == 2);
  CHECK(d.elastic_events == 1);
  REQUIRE(d.ranks.size() == 2);
  CHECK(d.ranks[0].rank == 8);
  CHECK(d.ranks[0].pid == 4242);
  CHECK(d.ranks[0].state == RankState::running);
  CHECK_FALSE(d.ranks[0].exit_code);
  CHECK(d.ranks[0].run_seconds == Approx(12.3));
  CHECK(d.ranks[0].last_line == "step 100 loss 0.25");
  CHECK(*d.ranks[0].progress_age == Approx(0.5));
  CHECK_FALSE(d.ranks[0].step);
  CHECK(*d.ranks[0].rss_bytes == 123456789u);
  CHECK(*d.ranks[0].cpu_percent == Approx(99.9));
  CHECK(d.ranks[0].restarts == 2);
  CHECK(d.ranks[1].state == RankState::exited);
  CHECK(*d.ranks[1].exit_code == 7);
  CHECK_FALSE(d.ranks[1].progress_age);
  CHECK_FALSE(d.ranks[1].rss_bytes);
}

TEST_CASE("status record: 8 ranks with 160-byte lines stay under 2.5 KB (docs/scale.md)") {
  NodeStatus s = sample();
  s.node_rank = 16383;
  s.host = "gpu-node-16384";
  s.world_size = 131072;
  s.nnodes = 16384;
  s.ranks.clear();
  for (int i = 0; i < 8; ++i) {
    RankStatus r = sample().ranks[0];
    r.rank = 131064 + i;
    r.pid = 4194304;
    r.last_line = std::string(kStatusLineBytes, 'x');
    r.run_seconds = 123456.7;  // the longest figures a week-long run of 8 busy GPUs' workers has
    r.rss_bytes = 12345678901;
    r.cpu_percent = 812.4;
    r.progress_age = 12.3;
    s.ranks.push_back(r);
  }
  CHECK(encode_node_status(s).size() < 2560);
}

TEST_CASE("status record: malformed records are one error, never a crash") {
  const std::vector<std::string> bad = {
      "",
      "{",
      "[]",
      R"({"v":2})",
      R"({"v":1,"n":0})",
      R"({"v":1,"n":0,"h":"a","a":"running","t":0,"at":0,"ws":1,"nn":1,"el":0,"r":[{"r":0}]})",
      R"({"v":1,"n":1.5,"h":"a","a":"running","t":0,"at":0,"ws":1,"nn":1,"el":0,"r":[]})",
      R"({"v":1,"n":0,"h":"a","a":"running","t":0,"at":0,"ws":1,"nn":1,"el":0,"r":[{"r":0,"l":0,"p":1,"s":"dancing","c":null,"u":0,"o":"","g":null,"k":null,"m":null,"cpu":null,"x":0}]})",
  };
  for (const auto& b : bad) {
    CAPTURE(b);
    CHECK_THROWS_AS(decode_node_status(b), Error);
  }
}

TEST_CASE("clean_status_line: the visible text, safe bytes, cut at a character") {
  struct Row {
    std::string in;
    std::size_t max;
    std::string out;
  };
  const std::vector<Row> rows = {
      {"step 1 loss 0.5", 160, "step 1 loss 0.5"},
      {"10%|#   \r50%|#####   \r90%|#########", 160, "90%|#########"},  // a progress bar's last redraw
      {"epoch 1\r", 160, "epoch 1"},
      {"tab\there\x1b[31mred", 160, "tab here [31mred"},  // control characters (ESC too) as spaces
      {"bad \xff\xfe bytes", 160, "bad \xEF\xBF\xBD\xEF\xBF\xBD bytes"},
      {"caf\xC3\xA9", 160, "caf\xC3\xA9"},
      {"caf\xC3\xA9", 4, "caf"},                                      // never half a character
      {"\xED\xA0\x80", 160, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},  // a surrogate is not UTF-8
      {"\xC3", 160, "\xEF\xBF\xBD"},                                  // truncated sequence
      {std::string(500, 'a'), 160, std::string(160, 'a')},
  };
  for (const auto& r : rows) {
    CAPTURE(r.in, r.max);
    CHECK(clean_status_line(r.in, r.max) == r.out);
  }
  // Whatever the bytes, the record stays valid JSON.
  std::string all;
  for (int c = 0; c < 256; ++c) all += static_cast<char>(c);
  NodeStatus s = sample();
  s.ranks[0].last_line = clean_status_line(all);
  CHECK(nlohmann::json::parse(encode_node_status(s)).is_object());
}

TEST_CASE("/proc parsing: CPU ticks after the command's parenthesis, resident pages") {
  // A command with spaces and parentheses, as a worker may name itself.
  const std::string stat =
      "4242 (python3 (rank 0)) S 4200 4242 4200 0 -1 4194560 7000 0 1 0 1234 567 0 0 20 0 9 0 123456 "
      "5000000000 250000 18446744073709551615 1 1 0 0 0 0 0 16781312 16386 0 0 0 17 3 0 0 0 0 0\n";
  CHECK(parse_proc_stat_cpu_ticks(stat) == std::optional<std::uint64_t>(1234 + 567));
  CHECK_FALSE(parse_proc_stat_cpu_ticks(""));
  CHECK_FALSE(parse_proc_stat_cpu_ticks("4242 (x) S 1 2"));
  CHECK_FALSE(parse_proc_stat_cpu_ticks("4242 (x) S 4200 4242 4200 0 -1 4194560 7000 0 1 0 12a4 567 0"));
  CHECK(parse_proc_statm_resident_pages("1220660 30288 7600 1 0 120000 0\n") ==
        std::optional<std::uint64_t>(30288));
  CHECK_FALSE(parse_proc_statm_resident_pages("1220660"));
  CHECK_FALSE(parse_proc_statm_resident_pages(""));
}

TEST_CASE("cpu_percent: of one core, nothing without a sane interval") {
  CHECK(*cpu_percent(100, 200, 1.0, 100) == Approx(100.0));
  CHECK(*cpu_percent(100, 150, 2.0, 100) == Approx(25.0));
  CHECK(*cpu_percent(0, 800, 1.0, 100) == Approx(800.0));  // 8 threads busy
  CHECK_FALSE(cpu_percent(200, 100, 1.0, 100));            // a new process under a reused pid
  CHECK_FALSE(cpu_percent(100, 200, 0.0, 100));
  CHECK_FALSE(cpu_percent(100, 200, 1.0, 0));
}

TEST_CASE("status_interval_ms: 1 s, then node rank 0 takes at most kMaxStatusRate records a second") {
  const std::vector<std::pair<int, std::int64_t>> rows = {
      {1, 1000}, {2, 1000}, {4096, 1000}, {4097, 1001}, {8192, 2000}, {16384, 4000},
  };
  for (const auto& [nodes, ms] : rows) {
    CAPTURE(nodes);
    CHECK(status_interval_ms(nodes) == ms);
  }
  CHECK(status_key(3) == "/status/3");
}

TEST_CASE(
    "rank_state: an ended worker is stopped or exited, else hung, running after progress, or starting") {
  struct Row {
    WorkerFacts w;
    RankState state;
  };
  const Row rows[] = {
      {{false, false, false, false}, RankState::starting},
      {{false, false, false, true}, RankState::running},
      {{false, false, true, false}, RankState::hung},  // hung before any output line: hung
      {{false, false, true, true}, RankState::hung},
      {{true, false, false, true}, RankState::exited},
      {{true, false, true, true}, RankState::exited},  // hung, then it exited on its own
      {{true, true, false, false}, RankState::stopped},
      {{true, true, true, true}, RankState::stopped},  // the hang's teardown stopped it
  };
  for (const auto& r : rows) {
    INFO(r.w.exited << r.w.stopped_by_ddprun << r.w.hung << r.w.progressed);
    CHECK(rank_state(r.w) == r.state);
  }
}

TEST_CASE("agent_state_of: finished, then collecting_stacks, stopping, running") {
  CHECK(std::string(agent_state_of(true, true, true)) == "finished");
  CHECK(std::string(agent_state_of(false, true, true)) == "collecting_stacks");
  CHECK(std::string(agent_state_of(false, false, true)) == "stopping");
  CHECK(std::string(agent_state_of(false, false, false)) == "running");
}
