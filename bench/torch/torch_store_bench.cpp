// The store-scaling workload of bench/store_bench.cpp on c10d::TCPStore (libtorch 1.13):
// N clients connect, set a 64-byte key, add to a counter, wait for "done" set by the last one.
// Usage: torch_store_bench [--runs R] [--sched idle|batch|normal] [N ...]. Prints a Markdown table.
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <string>

#include "bench_harness.hpp"

int main(int argc, char** argv) {
  return bench::table_main(argc, argv, "c10d::TCPStore", [](int n) {
    c10d::TCPStoreOptions so;
    so.port = 0;
    so.isServer = true;
    so.waitWorkers = false;
    so.timeout = std::chrono::seconds(120);
    c10d::TCPStore server("127.0.0.1", so);
    const std::uint16_t port = server.getPort();
    const std::vector<uint8_t> value(64, 'v');
    return bench::run_once(n, [&](int i) {
      c10d::TCPStoreOptions co;
      co.port = port;
      co.isServer = false;
      co.waitWorkers = false;
      co.timeout = std::chrono::seconds(120);
      c10d::TCPStore c("127.0.0.1", co);
      c.set("key/" + std::to_string(i), value);
      if (c.add("counter", 1) == n) c.set("done", std::vector<uint8_t>{'1'});
      c.wait({"done"});
    });
  });
}
