// --metrics-port against real agents on loopback (docs/observe.md): node 0's agent serves every
// rank's series in Prometheus' text format over plain HTTP, each node its own with
// --metrics-all-nodes, a bad request gets 400, a busy port is one line and nothing keeps running.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <fstream>

#include "e2e/job.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

// Two agents x two workers that tick until $DIR/go exists, then exit 0.
const std::vector<std::string> kTicking =
    sh("echo \"hello from $RANK\"; while [ ! -e \"$DIR/go\" ]; do echo \"tick $RANK\"; sleep 0.2; done");

// One raw request to 127.0.0.1:port, the whole answer (the server closes); "" when nothing listens.
std::string http(int port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<std::uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) == 0) {
    (void)!::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    char buf[4096];
    pollfd p{fd, POLLIN, 0};
    // Bounded: a server that never answers fails the test instead of hanging it.
    while (::poll(&p, 1, 10000) == 1) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<std::size_t>(n));
    }
  }
  ::close(fd);
  return out;
}

std::string get_metrics(int port) {
  return http(port, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
}

std::string state_series(int rank, int local_rank, int node_rank) {
  return "ddprun_rank_state{rank=\"" + std::to_string(rank) + "\",local_rank=\"" +
         std::to_string(local_rank) + "\",node_rank=\"" + std::to_string(node_rank) + "\",host=\"";
}

// Scrapes until every rank in `ranks` shows as running (the agents publish about once a second).
std::string scrape_until_running(int port, const std::vector<int>& ranks, int nproc) {
  std::string last;
  for (int i = 0; i < 240; ++i) {
    last = get_metrics(port);
    bool all = !last.empty();
    for (const int r : ranks) {
      const std::string prefix = state_series(r, r % nproc, r / nproc);
      const auto at = last.find(prefix);
      // This rank's first running line (the states come in a fixed order) says 1.
      const std::string running = "state=\"running\"} ";
      const auto line = at == std::string::npos ? at : last.find(running, at);
      all = all && line != std::string::npos && last.compare(line + running.size(), 2, "1\n") == 0;
    }
    if (all) return last;
    std::this_thread::sleep_for(250ms);
  }
  FAIL("the metrics never showed every rank running; last answer:\n" << last);
  return last;
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (auto at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("metrics port: node 0 serves every rank's series in Prometheus text format", "[e2e][metrics]") {
  Job job;
  const int port = free_port();
  job.start(2, 2, kTicking, {"--metrics-port", std::to_string(port)});
  const std::string m = scrape_until_running(port, {0, 1, 2, 3}, 2);
  INFO(m);
  CHECK(m.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK_THAT(m, Catch::Contains("Content-Type: text/plain; version=0.0.4"));
  CHECK_THAT(m, Catch::Contains("# TYPE ddprun_rank_state gauge\n"));
  CHECK_THAT(m, Catch::Contains("# HELP ddprun_rank_rss_bytes "));
  CHECK_THAT(m, Catch::Contains("\nddprun_job_world_size 4\n"));
  CHECK_THAT(m, Catch::Contains("\nddprun_job_nodes 2\n"));
  CHECK_THAT(m, Catch::Contains("\nddprun_job_attempt 0\n"));
  for (int rank = 0; rank < 4; ++rank) {
    INFO(rank);
    const std::string labels = "{rank=\"" + std::to_string(rank) + "\",local_rank=\"" +
                               std::to_string(rank % 2) + "\",node_rank=\"" + std::to_string(rank / 2) +
                               "\",host=\"";
    CHECK(count(m, "ddprun_rank_state" + labels) == 5);  // one per state, 1 for the one it is in
    CHECK(count(m, "ddprun_rank_pid" + labels) == 1);
    CHECK(count(m, "ddprun_rank_rss_bytes" + labels) == 1);
    CHECK(count(m, "ddprun_rank_seconds_since_progress" + labels) == 1);
    CHECK(count(m, "ddprun_rank_restarts" + labels) == 1);
  }
  // A request that is not GET /metrics is answered, not served metrics; a garbled one is 400.
  CHECK(http(port, "GET / HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404 ", 0) == 0);
  CHECK(http(port, "POST /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405 ", 0) == 0);
  CHECK(http(port, "\x16\x03\x01 garbage\r\n\r\n").rfind("HTTP/1.1 400 ", 0) == 0);
  CHECK(http(port, std::string(20000, 'A')).rfind("HTTP/1.1 400 ", 0) == 0);
  // The head limit is 8 KiB, blank line included: a scrape whose head is one byte longer is 400.
  const auto padded = [](std::size_t total) {
    const std::string start = "GET /metrics HTTP/1.1\r\nX-Pad: ";
    return start + std::string(total - start.size() - 4, 'p') + "\r\n\r\n";
  };
  CHECK(padded(8192).size() == 8192);
  CHECK(http(port, padded(8192)).rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(http(port, padded(8193)).rfind("HTTP/1.1 400 ", 0) == 0);
  CHECK(http(port, padded(10 * 1024)).rfind("HTTP/1.1 400 ", 0) == 0);
  // Still serving after those.
  CHECK(get_metrics(port).rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  // Looking changed nothing: the job ends as it would have.
  std::ofstream(job.dir / "go").put('\n');
  job.wait_all();
  for (auto& a : job.agents) {
    INFO(a.err());
    CHECK(a.code == 0);
  }
  // Gone with the job.
  CHECK(get_metrics(port).empty());
}

TEST_CASE("metrics on all nodes: every node's agent serves its own node's ranks", "[e2e][metrics]") {
  Job job;
  const int port0 = free_port();
  const int port1 = free_port();
  job.extra_of[0] = {"--metrics-port", std::to_string(port0)};
  job.extra_of[1] = {"--metrics-port", std::to_string(port1)};
  job.start(2, 2, kTicking, {"--metrics-all-nodes"});
  const std::string all = scrape_until_running(port0, {0, 1, 2, 3}, 2);
  const std::string own = scrape_until_running(port1, {2, 3}, 2);
  INFO(own);
  CHECK(own.find("{rank=\"0\"") == std::string::npos);
  CHECK(own.find("{rank=\"1\"") == std::string::npos);
  CHECK(own.find("ddprun_job_world_size") == std::string::npos);  // the job's figures are node 0's
  std::ofstream(job.dir / "go").put('\n');
  job.wait_all();
  for (auto& a : job.agents) {
    INFO(a.err());
    CHECK(a.code == 0);
  }
}

TEST_CASE("metrics port busy: one line naming it on every node, exit 2, nothing left", "[e2e][metrics]") {
  // Something else holds the port.
  const int busy = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(busy >= 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  REQUIRE(::bind(busy, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) == 0);
  REQUIRE(::listen(busy, 1) == 0);
  socklen_t len = sizeof sa;
  REQUIRE(::getsockname(busy, reinterpret_cast<sockaddr*>(&sa), &len) == 0);
  const int port = ntohs(sa.sin_port);
  Job job;
  job.start(2, 2, kTicking, {"--metrics-port", std::to_string(port)});
  job.wait_all(90s);  // node 1 learns it as a start-up error, not at --rdzv-timeout
  for (auto& a : job.agents) {
    INFO(a.err());
    CHECK(a.code == 2);
    CHECK_THAT(a.err(),
               Catch::Contains("--metrics-port " + std::to_string(port)) && Catch::Contains("in use"));
  }
  ::close(busy);
}
