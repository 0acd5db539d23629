// Store scaling: N clients connect, set a 64-byte key, add to a counter and wait for "done".
// Usage: store_bench [--runs R] [--sched idle|batch|normal] [N ...]   (default N = 64..4096, R = 5,
// idle: see bench_harness.hpp). Prints a Markdown table.
// The PyTorch c10d::TCPStore version of the same workload is bench/torch/torch_store_bench.
#include <cstdio>
#include <string>

#include "bench_harness.hpp"
#include "rendezvous/client.hpp"
#include "rendezvous/server.hpp"

using namespace ddprun::rdzv;

int main(int argc, char** argv) {
  std::vector<int> ns;
  int runs = 0;
  bench::parse_args(argc, argv, ns, runs);
  bench::raise_fd_limit();
  std::printf("| clients | ddprun store median ms | min | max |\n|---|---|---|---|\n");
  for (int n : ns) {
    if (static_cast<std::size_t>(2 * n + 64) > bench::fd_limit()) {
      std::printf("| %d | skipped: descriptor limit %zu too low |  |  |\n", n, bench::fd_limit());
      continue;
    }
    std::vector<double> times;
    for (int r = 0; r < runs; ++r) {
      ServerOptions so;
      so.host = "127.0.0.1";
      so.run_id = "bench";
      StoreServer server(so);
      const std::string value(64, 'v');
      const double ms = bench::run_once(n, [&](int i) {
        ClientOptions co;
        co.port = server.port();
        co.run_id = "bench";
        co.connect_timeout = std::chrono::seconds(60);
        co.op_timeout = std::chrono::seconds(60);
        TcpStore c(co);
        c.set("key/" + std::to_string(i), value);
        if (c.add("counter", 1) == n) c.set("done", "1");
        c.wait({"done"}, std::chrono::seconds(60));
      });
      if (ms >= 0) times.push_back(ms);
    }
    const auto s = bench::stats(times);
    std::printf("| %d | %.1f | %.1f | %.1f |\n", n, s.median, s.min, s.max);
    std::fflush(stdout);
  }
}
