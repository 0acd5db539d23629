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
// Client threads run SCHED_IDLE by default (--sched idle): on a real cluster the clients sit on
// other nodes and never take the server's CPU; SCHED_IDLE threads run only when nothing else wants
// the CPU, the nearest a shared machine gets to that. With plain priorities the server thread is
// one of 1000s of runnable threads when they are released: traced here, it got no CPU at all for
// the first 30 ms of slow runs. --sched batch (no wake-up preemption only) and --sched normal (the
// plain co-located case) are there to compare. Both stores get the same treatment.
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
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

// Gates for 1000s of threads. Straight to the futex: std::atomic::wait spins and yields first,
// and a finished client yielding would take CPU from the clients and server still working.
inline void gate_wait(std::atomic<int>& gate) {
  while (gate.load() == 0) {
    ::syscall(SYS_futex, reinterpret_cast<int*>(&gate), FUTEX_WAIT_PRIVATE, 0, nullptr, nullptr, 0);
  }
}

inline void gate_open(std::atomic<int>& gate) {
  gate.store(1);
  ::syscall(SYS_futex, reinterpret_cast<int*>(&gate), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

inline int& client_policy() {
  static int policy = SCHED_IDLE;
  return policy;
}

inline const char* policy_name(int policy) {
  return policy == SCHED_IDLE ? "SCHED_IDLE" : policy == SCHED_BATCH ? "SCHED_BATCH" : "SCHED_OTHER";
}

// Runs `client(i)` on n threads released together; returns wall milliseconds, or -1 on failure.
inline double run_once(int n, const std::function<void(int)>& client) {
  std::mutex mu;
  std::atomic<int> go{0};
  std::atomic<int> failures{0};
  std::atomic<std::int64_t> last_done{0};  // steady_clock ticks when the latest client returned
  std::atomic<int> finished{0};
  std::atomic<int> exit_gate{0};
  std::string first_error;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      if (client_policy() != SCHED_OTHER) {
        sched_param sp{};
        ::pthread_setschedparam(::pthread_self(), client_policy(), &sp);
      }
      // glibc picks a malloc arena (reading /sys/devices/system/cpu/online) on a thread's first
      // allocation: do that before the clock starts, it is thread set-up.
      void* volatile warm = std::malloc(64);
      std::free(warm);
      gate_wait(go);
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
      gate_wait(exit_gate);
    });
  }
  const auto t0 = std::chrono::steady_clock::now();
  gate_open(go);
  for (int f = finished.load(); f < n; f = finished.load()) finished.wait(f);
  gate_open(exit_gate);
  for (auto& t : threads) t.join();
  const auto t1 =
      std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(last_done.load()));
  if (failures.load() > 0) {
    std::fprintf(stderr, "  %d of %d clients failed; first: %s\n", failures.load(), n, first_error.c_str());
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

// Parses "--runs R", "--sched idle|batch|normal" and a list of N values from argv; defaults
// 64..4096 doubling, 5 runs, idle.
inline void parse_args(int argc, char** argv, std::vector<int>& ns, int& runs) {
  runs = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--runs" && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else if (a == "--sched" && i + 1 < argc) {
      const std::string p = argv[++i];
      if (p != "idle" && p != "batch" && p != "normal") {
        std::fprintf(stderr, "--sched %s: expected idle, batch or normal\n", p.c_str());
        std::exit(2);
      }
      client_policy() = p == "normal" ? SCHED_OTHER : p == "batch" ? SCHED_BATCH : SCHED_IDLE;
    } else {
      ns.push_back(std::atoi(argv[i]));
    }
  }
  if (ns.empty()) ns = {64, 128, 256, 512, 1024, 2048, 4096};
  std::printf("client threads: %s\n\n", policy_name(client_policy()));
}

// The main of both benches: for each N, R calls of `one_run(n)` (a fresh server and run_once;
// milliseconds, or -1 on failure), printed as a Markdown row of median, min and max.
inline int table_main(int argc, char** argv, const char* store, const std::function<double(int)>& one_run) {
  std::vector<int> ns;
  int runs = 0;
  parse_args(argc, argv, ns, runs);
  raise_fd_limit();
  std::printf("| clients | %s median ms | min | max |\n|---|---|---|---|\n", store);
  for (int n : ns) {
    if (static_cast<std::size_t>(2 * n + 64) > fd_limit()) {
      std::printf("| %d | skipped: descriptor limit %zu too low |  |  |\n", n, fd_limit());
      continue;
    }
    std::vector<double> times;
    for (int r = 0; r < runs; ++r) {
      const double ms = one_run(n);
      if (ms >= 0) times.push_back(ms);
    }
    const Stats s = stats(times);
    std::printf("| %d | %.1f | %.1f | %.1f |\n", n, s.median, s.min, s.max);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace bench
