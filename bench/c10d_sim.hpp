#pragma once
// bench/c10d_scale's simulated workers (one --sim-shard process's share of the ranks): each speaks
// PyTorch's TCPStore protocol on a non-blocking socket and takes init_process_group's steps (the list at
// the top of c10d_scale.cpp), all on one epoll set; then NCCL's monitor. Also the helpers every process
// of the run shares.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "store/c10d_codec.hpp"

namespace c10d_bench {

namespace c10d = ddprun::store::c10d;
using Clock = std::chrono::steady_clock;

inline double secs(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Every socket of 131,072 workers, their servers and relays: far above any default limit.
inline std::uint64_t raise_fds() {
  rlimit r{};
  ::getrlimit(RLIMIT_NOFILE, &r);
  std::uint64_t want = 1u << 20;
  std::ifstream nr("/proc/sys/fs/nr_open");
  nr >> want;
  rlimit up{static_cast<rlim_t>(want), static_cast<rlim_t>(want)};
  if (::setrlimit(RLIMIT_NOFILE, &up) != 0) {
    up.rlim_cur = r.rlim_max;
    up.rlim_max = r.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &up);
  }
  ::getrlimit(RLIMIT_NOFILE, &r);
  return r.rlim_cur;
}

// Node n's address: 127.2.x.y for workers (their node's host), 127.3.x.y for its relay.
inline std::string node_addr(int net, int n) {
  return "127." + std::to_string(net) + "." + std::to_string((n >> 8) & 255) + "." + std::to_string(n & 255);
}

inline void wait_stdin_eof() {
  char b[256];
  while (::read(0, b, sizeof b) > 0) {
  }
}

enum class St : std::uint8_t { connecting, ping, add, uid_wait, uid_get, gloo_wait, gloo_get, done, check };

struct Rank {
  int fd = -1;
  St st = St::connecting;
  std::uint32_t need = 0;  // bytes of the answer still to come
  std::uint32_t got = 0;
};

struct Sim {
  int n = 0;      // ranks in the job
  int first = 0;  // this process simulates ranks [first, first + count)
  int count = 0;
  int per_node = 8;
  int group = 8;
  bool relay = false;
  int server_port = 0;
  std::vector<int> relay_ports;  // node 1.. : index node-1
  int ep = -1;
  std::vector<Rank> ranks;
  int done = 0;
  int connected = 0;
  std::uint64_t errors = 0;
  std::string uid_key = "/default_pg/0//cuda//0";
  std::array<char, 1 << 16> buf{};
  std::uint64_t checks_answered = 0;

  std::string le64(std::uint64_t v) const {
    std::string s;
    c10d::put_i64(s, static_cast<std::int64_t>(v));
    return s;
  }
  std::string req(c10d::Op op, std::vector<std::string> keys, std::vector<std::string> values = {},
                  std::int64_t number = 0, std::uint32_t u32 = 0) const {
    c10d::Request r;
    r.op = op;
    r.keys = std::move(keys);
    r.values = std::move(values);
    r.number = number;
    r.u32 = u32;
    return *c10d::encode_request(c10d::Layout::v22, r);
  }
  std::vector<std::string> group_keys(int r) const {
    std::vector<std::string> k;
    const int g0 = r / group * group;
    for (int i = g0; i < std::min(n, g0 + group); ++i)
      k.push_back("/gloo/" + std::to_string(g0) + "/" + std::to_string(i));
    return k;
  }

  void send(int r, const std::string& bytes) {
    const ssize_t w = ::send(ranks[static_cast<std::size_t>(r)].fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (w != static_cast<ssize_t>(bytes.size())) ++errors;  // tiny requests: the socket always takes them
  }
  void expect(int r, St st, std::uint32_t bytes) {
    ranks[static_cast<std::size_t>(r)].st = st;
    ranks[static_cast<std::size_t>(r)].need = bytes;
    ranks[static_cast<std::size_t>(r)].got = 0;
  }

  bool open(int r) {
    const int node = r / per_node;
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ::setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    sockaddr_in src{};
    src.sin_family = AF_INET;
    ::inet_pton(AF_INET, node_addr(2, node).c_str(), &src.sin_addr);
    ::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src);
    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    const bool via_relay = relay && node != 0;
    dst.sin_port = htons(static_cast<std::uint16_t>(
        via_relay ? relay_ports[static_cast<std::size_t>(node - 1)] : server_port));
    ::inet_pton(AF_INET, via_relay ? node_addr(3, node).c_str() : "127.0.0.1", &dst.sin_addr);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof dst) != 0 && errno != EINPROGRESS) {
      ::close(fd);
      return false;
    }
    ranks[static_cast<std::size_t>(r)].fd = fd;
    epoll_event ev{};
    ev.events = EPOLLOUT | EPOLLIN;
    ev.data.u32 = static_cast<std::uint32_t>(r);
    ::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    return true;
  }

  // One rank's next step once its answer is complete.
  void step(int r) {
    Rank& k = ranks[static_cast<std::size_t>(r)];
    switch (k.st) {
      case St::ping:
        send(r, req(c10d::Op::add, {"init/"}, {}, 1));
        expect(r, St::add, 8);
        return;
      case St::add:
        if (r == 0) {
          send(r, req(c10d::Op::set, {uid_key}, {std::string(128, 'u')}));
          gloo(r);
        } else {
          send(r, req(c10d::Op::wait, {uid_key}));
          expect(r, St::uid_wait, 1);
        }
        return;
      case St::uid_wait:
        send(r, req(c10d::Op::get, {uid_key}));
        expect(r, St::uid_get, 8 + 128);
        return;
      case St::uid_get:
        gloo(r);
        return;
      case St::gloo_wait:
        send(r, req(c10d::Op::multi_get, group_keys(r)));
        expect(r, St::gloo_get, static_cast<std::uint32_t>(group_keys(r).size() * (8 + 64)));
        return;
      case St::gloo_get:
        k.st = St::done;
        ++done;
        return;
      case St::check:
        ++checks_answered;
        k.st = St::done;
        return;
      default:
        return;
    }
  }
  void gloo(int r) {
    const auto keys = group_keys(r);
    send(r, req(c10d::Op::set, {"/gloo/" + std::to_string(r / group * group) + "/" + std::to_string(r)},
                {std::string(64, 'a')}));
    send(r, req(c10d::Op::wait, keys));
    expect(r, St::gloo_wait, 1);
  }

  void on_event(int r, std::uint32_t events) {
    Rank& k = ranks[static_cast<std::size_t>(r)];
    if (k.st == St::connecting) {
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(k.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0 || (events & (EPOLLERR | EPOLLHUP)) != 0) {
        // Refused or reset: try again, as torch's client does (its backoff is longer).
        ::epoll_ctl(ep, EPOLL_CTL_DEL, k.fd, nullptr);
        ::close(k.fd);
        ++errors;
        open(r);
        return;
      }
      if ((events & EPOLLOUT) == 0) return;
      ++connected;
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u32 = static_cast<std::uint32_t>(r);
      ::epoll_ctl(ep, EPOLL_CTL_MOD, k.fd, &ev);
      send(r, std::string("\x00\xce\xf7\x85\x3c", 5) +
                  req(c10d::Op::ping, {}, {}, 0, static_cast<std::uint32_t>(r)));
      expect(r, St::ping, 4);
      return;
    }
    const ssize_t got = ::recv(k.fd, buf.data(), buf.size(), 0);
    if (got <= 0) {
      if (got < 0 && errno == EAGAIN) return;
      ++errors;
      ::epoll_ctl(ep, EPOLL_CTL_DEL, k.fd, nullptr);
      k.st = St::done;  // lost: counted as an error, not as done
      return;
    }
    k.got += static_cast<std::uint32_t>(got);
    if (k.got > k.need) ++errors;  // a well-behaved server sends exactly the answer
    if (k.got >= k.need) step(r);
  }

  // Runs until every rank is done or `deadline`; returns false on the deadline.
  bool run_until(Clock::time_point deadline, const std::function<bool()>& finished) {
    std::vector<epoll_event> evs(4096);
    while (!finished()) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      const int m = ::epoll_wait(ep, evs.data(), static_cast<int>(evs.size()),
                                 static_cast<int>(std::min<long>(left, 100)));
      for (int i = 0; i < m; ++i)
        on_event(static_cast<int>(evs[static_cast<std::size_t>(i)].data.u32),
                 evs[static_cast<std::size_t>(i)].events);
    }
    return true;
  }
};

// NCCL's monitor on this process's ranks: one CHECK a rank a second, spread over the second; then
// until every answer is in (5 s at most).
inline void monitor(Sim& sim, int seconds) {
  const std::string check = sim.req(c10d::Op::check, {"/nccl/dump_signal"});
  const auto start = Clock::now();
  int slot = 0;
  const int slots = 100;  // 10 ms apart
  while (Clock::now() - start < std::chrono::seconds(seconds)) {
    const auto tick = start + std::chrono::milliseconds(10 * (slot + 1));
    for (int r = sim.first + (slot % slots); r < sim.first + sim.count; r += slots) {
      if (sim.ranks[static_cast<std::size_t>(r)].st != St::done) continue;
      sim.send(r, check);
      sim.expect(r, St::check, 1);
    }
    ++slot;
    sim.run_until(tick, [] { return false; });
  }
  sim.run_until(Clock::now() + std::chrono::seconds(5), [&] {
    for (int r = sim.first; r < sim.first + sim.count; ++r) {
      if (sim.ranks[static_cast<std::size_t>(r)].st != St::done) return false;
    }
    return true;
  });
}

// --sim-shard: reads "n first count per_node group relay server_port timeout_s monitor_s", then (relay)
// the relay ports of nodes 1.., then waits for "go"; prints "done OK DONE ERRORS CONNECTED_S", waits for
// "monitor" (or EOF), monitors and prints "mon". Exits when its standard input closes.
inline int sim_shard() {
  raise_fds();
  Sim sim;
  int relay = 0, timeout_s = 0, monitor_s = 0;
  if (std::scanf("%d %d %d %d %d %d %d %d %d", &sim.n, &sim.first, &sim.count, &sim.per_node, &sim.group,
                 &relay, &sim.server_port, &timeout_s, &monitor_s) != 9) {
    return 2;
  }
  sim.relay = relay != 0;
  if (sim.relay) {
    const int nodes = (sim.n + sim.per_node - 1) / sim.per_node;
    sim.relay_ports.resize(static_cast<std::size_t>(nodes - 1));
    for (auto& p : sim.relay_ports) {
      if (std::scanf("%d", &p) != 1) return 2;
    }
  }
  sim.ep = ::epoll_create1(EPOLL_CLOEXEC);
  sim.ranks.resize(static_cast<std::size_t>(sim.n));
  char word[32] = {};
  if (std::scanf("%31s", word) != 1) return 0;
  const auto t0 = Clock::now();
  for (int r = sim.first; r < sim.first + sim.count; ++r) {
    if (!sim.open(r)) ++sim.errors;
  }
  double connected_s = 0;
  bool connected_seen = false;
  const bool ok = sim.run_until(t0 + std::chrono::seconds(timeout_s), [&] {
    if (!connected_seen && sim.connected == sim.count) {
      connected_seen = true;
      connected_s = secs(Clock::now() - t0);
    }
    return sim.done >= sim.count;
  });
  if (!ok) {
    // Where the ranks that did not finish are stuck, by step (St's order).
    std::array<int, 9> stuck{};
    for (int r = sim.first; r < sim.first + sim.count; ++r)
      ++stuck[static_cast<std::size_t>(sim.ranks[static_cast<std::size_t>(r)].st)];
    std::fprintf(stderr,
                 "c10d_scale: ranks %d..%d by step (connecting ping add uid_wait uid_get gloo_wait gloo_get "
                 "done check):",
                 sim.first, sim.first + sim.count - 1);
    for (const int c : stuck) std::fprintf(stderr, " %d", c);
    std::fprintf(stderr, "\n");
  }
  std::printf("done %d %d %llu %.3f\n", ok ? 1 : 0, sim.done, static_cast<unsigned long long>(sim.errors),
              connected_s);
  std::fflush(stdout);
  if (std::scanf("%31s", word) == 1 && ok) monitor(sim, monitor_s);
  std::printf("mon\n");
  std::fflush(stdout);
  wait_stdin_eof();
  return 0;
}

}  // namespace c10d_bench
