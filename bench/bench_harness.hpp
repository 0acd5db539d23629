#pragma once
// Shared by store_bench (ddprun's store) and torch/torch_store_bench (c10d::TCPStore): the same
// workload and the same timing, so the figures compare.
//
// Workload for N clients: each connects, sets a 64-byte key, adds 1 to a counter, and waits for
// "done", which the client that brings the counter to N sets. Timed from releasing the (already
// created) client threads until the last client returned (its connection closed); creating,
// exiting and joining the threads is not timed: with 2048 threads on 2 cores that alone costs
// ~50 ms, which says nothing about either store. Threads exit after the last client is done.
//
// Client threads run SCHED_BATCH by default (--sched batch): on a real cluster the clients sit on
// other nodes and never take the server's CPU, but here a client woken by the server's answer
// preempts the server thread (CFS wake-up preemption) while it still has 1000s of answers to send.
// Batch threads do not preempt on wake-up. Both stores get the same treatment; --sched normal
// measures the plain co-located case.
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace bench {

// Raises the soft descriptor limit to the hard one: N clients need 2N descriptors in-process.
inline void raise_fd_limit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
}

inline std::size_t fd_limit() {
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  return static_cast<std::size_t>(rl.rlim_cur);
}

inline bool& batch_clients() {
  static bool on = true;
  return on;
}

// Runs `client(i)` on n threads released together; returns wall milliseconds, or -1 on failure.
inline double run_once(int n, const std::function<void(int)>& client) {
  std::mutex mu;
  std::atomic<bool> go{false};  // futex wake-all: no mutex for 1000s of threads to queue on
  std::atomic<int> failures{0};
  std::atomic<std::int64_t> last_done{0};  // steady_clock ticks when the latest client returned
  std::atomic<int> finished{0};
  std::atomic<bool> exit_gate{false};
  std::string first_error;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      if (batch_clients()) {
        sched_param sp{};
        ::pthread_setschedparam(::pthread_self(), SCHED_BATCH, &sp);
      }
      // glibc picks a malloc arena (reading /sys/devices/system/cpu/online) on a thread's first
      // allocation: do that before the clock starts, it is thread set-up.
      void* volatile warm = std::malloc(64);
      std::free(warm);
      go.wait(false);
      try {
        client(i);
        const std::int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
        std::int64_t seen = last_done.load();
        while (seen < now && !last_done.compare_exchange_weak(seen, now)) {
        }
      } catch (const std::exception& e) {
        if (failures.fetch_add(1) == 0) {
          std::lock_guard lk(mu);
          first_error = e.what();
        }
      }
      // Threads exit only once every client is done: a thread's exit unmaps its stack, and the
      // TLB shoot-downs that costs would land on clients and the server still working.
      if (finished.fetch_add(1) + 1 == n) finished.notify_all();
      exit_gate.wait(false);
    });
  }
  const auto t0 = std::chrono::steady_clock::now();
  go = true;
  go.notify_all();
  for (int f = finished.load(); f < n; f = finished.load()) finished.wait(f);
  exit_gate = true;
  exit_gate.notify_all();
  for (auto& t : threads) t.join();
  const auto t1 = std::chrono::steady_clock::time_point(
      std::chrono::steady_clock::duration(last_done.load()));
  if (failures.load() > 0) {
    std::fprintf(stderr, "  %d of %d clients failed; first: %s\n", failures.load(), n,
                 first_error.c_str());
    return -1;
  }
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

struct Stats {
  double median = 0, min = 0, max = 0;
};

inline Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  Stats s;
  if (v.empty()) return s;
  s.min = v.front();
  s.max = v.back();
  s.median = v[v.size() / 2];
  return s;
}

// Parses "--runs R", "--sched batch|normal" and a list of N values from argv; defaults 64..4096
// doubling, 5 runs, batch.
inline void parse_args(int argc, char** argv, std::vector<int>& ns, int& runs) {
  runs = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--runs" && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else if (a == "--sched" && i + 1 < argc) {
      batch_clients() = std::string(argv[++i]) != "normal";
    } else {
      ns.push_back(std::atoi(argv[i]));
    }
  }
  if (ns.empty()) ns = {64, 128, 256, 512, 1024, 2048, 4096};
  std::printf("client threads: %s\n\n", batch_clients() ? "SCHED_BATCH" : "SCHED_OTHER");
}

}  // namespace bench
