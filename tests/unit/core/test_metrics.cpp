// --metrics-port's exposition and request verdicts (core/metrics.hpp).
#include <catch2/catch.hpp>

#include <string>

#include "core/metrics.hpp"

using namespace ddprun::core;

namespace {

std::vector<NodeStatus> job() {
  NodeStatus n0;
  n0.node_rank = 0;
  n0.host = "gpu-a";
  n0.attempt = 1;
  n0.world_size = 3;
  n0.nnodes = 2;
  n0.elastic_events = 0;
  RankStatus a;
  a.rank = 0;
  a.local_rank = 0;
  a.pid = 100;
  a.state = RankState::running;
  a.run_seconds = 12.5;
  a.progress_age = 0.25;
  a.rss_bytes = 1048576;
  a.cpu_percent = 99.5;
  a.restarts = 1;
  RankStatus b;
  b.rank = 1;
  b.local_rank = 1;
  b.pid = 101;
  b.state = RankState::exited;
  b.exit_code = 3;
  b.run_seconds = 2;
  b.restarts = 1;
  n0.ranks = {a, b};
  NodeStatus n1;
  n1.node_rank = 1;
  n1.host = "we\"ird\\host\nname";
  RankStatus c;
  c.rank = 2;
  c.local_rank = 0;
  c.pid = 200;
  c.state = RankState::hung;
  c.progress_age = 300;
  n1.ranks = {c};
  return {n0, n1};
}

bool has(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

}  // namespace

TEST_CASE("label values escape backslash, quote and newline") {
  const std::vector<std::pair<std::string, std::string>> table = {
      {"plain", "plain"},
      {"a\\b", "a\\\\b"},
      {"say \"hi\"", "say \\\"hi\\\""},
      {"two\nlines", "two\\nlines"},
      {"", ""},
      {"tab\tstays", "tab\tstays"},
  };
  for (const auto& [in, want] : table) {
    INFO(in);
    CHECK(escape_label_value(in) == want);
  }
}

TEST_CASE("metrics: every rank's series with its labels, each family with HELP and TYPE once") {
  const std::string m = format_metrics(job());
  CHECK(has(m, "ddprun_job_attempt 1"));
  CHECK(has(m, "ddprun_job_world_size 3"));
  CHECK(has(m, "ddprun_job_nodes 2"));
  CHECK(has(m, R"(ddprun_rank_state{rank="0",local_rank="0",node_rank="0",host="gpu-a",state="running"} 1)"));
  CHECK(has(m, R"(ddprun_rank_state{rank="0",local_rank="0",node_rank="0",host="gpu-a",state="hung"} 0)"));
  CHECK(has(m, R"(ddprun_rank_state{rank="1",local_rank="1",node_rank="0",host="gpu-a",state="exited"} 1)"));
  CHECK(has(m, R"(ddprun_rank_rss_bytes{rank="0",local_rank="0",node_rank="0",host="gpu-a"} 1048576)"));
  CHECK(has(m, R"(ddprun_rank_cpu_percent{rank="0",local_rank="0",node_rank="0",host="gpu-a"} 99.500)"));
  CHECK(has(
      m, R"(ddprun_rank_seconds_since_progress{rank="0",local_rank="0",node_rank="0",host="gpu-a"} 0.250)"));
  CHECK(has(m, R"(ddprun_rank_exit_code{rank="1",local_rank="1",node_rank="0",host="gpu-a"} 3)"));
  CHECK(has(m, R"(ddprun_rank_restarts{rank="0",local_rank="0",node_rank="0",host="gpu-a"} 1)"));
  const std::string odd = R"(host="we\"ird\\host\nname")";
  CHECK(has(m, R"(ddprun_rank_state{rank="2",local_rank="0",node_rank="1",)" + odd + R"(,state="hung"} 1)"));
  CHECK(
      has(m, R"(ddprun_rank_seconds_since_progress{rank="2",local_rank="0",node_rank="1",)" + odd + "} 300"));
  // A figure a rank lacks is no sample (not a zero).
  CHECK(m.find(R"(ddprun_rank_rss_bytes{rank="2")") == std::string::npos);
  CHECK(m.find(R"(ddprun_rank_exit_code{rank="0")") == std::string::npos);
  for (const char* family :
       {"ddprun_job_attempt", "ddprun_job_world_size", "ddprun_rank_state", "ddprun_rank_rss_bytes",
        "ddprun_rank_cpu_percent", "ddprun_rank_seconds_since_progress", "ddprun_rank_restarts"}) {
    INFO(family);
    const std::string help = std::string("# HELP ") + family + " ";
    const std::string type = std::string("# TYPE ") + family + " gauge\n";
    CHECK(m.find(help) != std::string::npos);
    CHECK(m.find(help, m.find(help) + 1) == std::string::npos);
    CHECK(m.find(type) != std::string::npos);
  }
  // Every line is a comment or NAME{labels} VALUE: no raw newline leaked from a label.
  std::size_t pos = 0;
  while (pos < m.size()) {
    const auto eol = m.find('\n', pos);
    REQUIRE(eol != std::string::npos);
    const std::string line = m.substr(pos, eol - pos);
    INFO(line);
    CHECK((line.rfind("# ", 0) == 0 || line.rfind("ddprun_", 0) == 0));
    pos = eol + 1;
  }
}

TEST_CASE("metrics of another node alone: no job series") {
  auto nodes = job();
  nodes.erase(nodes.begin());
  const std::string m = format_metrics(nodes);
  CHECK(m.find("ddprun_job_attempt") == std::string::npos);
  CHECK(m.find(R"(rank="2")") != std::string::npos);
}

TEST_CASE("HTTP request verdicts") {
  struct Row {
    const char* head;
    int status;
    bool head_only;
  };
  const Row table[] = {
      {"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 200, false},
      {"GET /metrics HTTP/1.0\r\n\r\n", 200, false},
      {"GET /metrics?x=1 HTTP/1.1\r\n\r\n", 200, false},
      {"GET /metrics HTTP/1.1\n\n", 200, false},
      {"HEAD /metrics HTTP/1.1\r\n\r\n", 200, true},
      {"GET / HTTP/1.1\r\n\r\n", 404, false},
      {"GET /metricsx HTTP/1.1\r\n\r\n", 404, false},
      {"POST /metrics HTTP/1.1\r\n\r\n", 405, false},
      {"DELETE / HTTP/1.1\r\n\r\n", 405, false},
      {"GET /metrics\r\n\r\n", 400, false},
      {"GET /metrics HTTP/2\r\n\r\n", 400, false},
      {"GET  /metrics HTTP/1.1\r\n\r\n", 400, false},
      {"get /metrics HTTP/1.1\r\n\r\n", 400, false},
      {"GET metrics HTTP/1.1\r\n\r\n", 400, false},
      {"\x16\x03\x01\x02\x00", 400, false},
      {"", 400, false},
      {"GET /metrics HTTP/1.1 extra\r\n\r\n", 400, false},
  };
  for (const auto& row : table) {
    INFO(row.head);
    const auto v = classify_http_request(row.head);
    CHECK(v.status == row.status);
    CHECK(v.head_only == row.head_only);
  }
}

TEST_CASE("HTTP responses: length, type, close, and HEAD without the body") {
  const std::string r = http_response(200, kMetricsContentType, "abc\n", false);
  CHECK(r.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(r.find("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n") != std::string::npos);
  CHECK(r.find("Content-Length: 4\r\n") != std::string::npos);
  CHECK(r.find("Connection: close\r\n\r\nabc\n") != std::string::npos);
  const std::string h = http_response(200, kMetricsContentType, "abc\n", true);
  CHECK(h.find("Content-Length: 4\r\n") != std::string::npos);
  CHECK(h.substr(h.size() - 4) == "\r\n\r\n");
  CHECK(http_response(400, "text/plain", "bad\n", false).rfind("HTTP/1.1 400 Bad Request\r\n", 0) == 0);
  CHECK(http_response(405, "text/plain", "", false).find("Allow: GET, HEAD\r\n") != std::string::npos);
}

TEST_CASE("HTTP request heads: complete, more to read, or past the limit (8 KiB with the blank line)") {
  using S = HeadScan::State;
  struct Row {
    std::string in;
    S state;
    std::string head;
  };
  const std::string pad(8192 - 4 - 14, 'x');  // "GET / HTTP/1.1" is 14 bytes
  const Row rows[] = {
      {"", S::more, ""},
      {"GET /metrics HTTP/1.1\r\n", S::more, ""},
      {"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n", S::complete, "GET /metrics HTTP/1.1\r\nHost: a\r\n"},
      {"GET /metrics HTTP/1.1\n\n", S::complete, "GET /metrics HTTP/1.1\n"},
      {"GET /metrics HTTP/1.1\r\n\r\nbody after", S::complete, "GET /metrics HTTP/1.1\r\n"},
      {"GET / HTTP/1.1" + pad + "\r\n\r\n", S::complete, "GET / HTTP/1.1" + pad + "\r\n"},  // 8192 bytes
      {"GET / HTTP/1.1" + pad + "x\r\n\r\n", S::too_large, ""},                             // 8193
      {std::string(8191, 'A'), S::more, ""},
      {std::string(8192, 'A'), S::too_large, ""},
      {"GET / HTTP/1.1" + pad + "x\r\n", S::more, ""},  // 8191 bytes: a LF next would end it at 8192
      {"GET / HTTP/1.1" + pad + "x\r\nHost: a\r\n", S::too_large, ""},  // no end yet, and past the limit
  };
  for (const auto& row : rows) {
    INFO(row.in.size() << " bytes: " << row.in.substr(0, 40));
    const HeadScan h = scan_request_head(row.in, 8192);
    CHECK(h.state == row.state);
    CHECK(std::string(h.head) == row.head);
  }
}
