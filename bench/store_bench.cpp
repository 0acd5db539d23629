// Store scaling: N clients connect, set a 64-byte key, add to a counter and wait for "done".
// Usage: store_bench [--runs R] [--sched idle|batch|normal] [N ...]   (default N = 64..4096, R = 5,
// idle: see bench_harness.hpp). Prints a Markdown table.
// The PyTorch c10d::TCPStore version of the same workload is bench/torch/torch_store_bench.
#include <string>

#include "bench_harness.hpp"
#include "store/client.hpp"
#include "store/server.hpp"

using namespace ddprun::store;

int main(int argc, char** argv) {
  return bench::table_main(argc, argv, "ddprun store", [](int n) {
    ServerOptions so;
    so.host = "127.0.0.1";
    so.run_id = "bench";
    StoreServer server(so);
    const std::string value(64, 'v');
    return bench::run_once(n, [&](int i) {
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
  });
}
