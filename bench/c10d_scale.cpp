// The workers' store at scale (docs/scale.md, "The workers' store"): simulated workers that speak
// PyTorch's TCPStore protocol and do what init_process_group does, against ddprun's store (node 0's
// agent, and with relays) and against torch 2.x's libuv TCPStore server, in one run.
//
//   c10d_scale [--sizes 16384,65536,131072] [--servers agent,relay,torch] [--per-node 8] [--group 8]
//              [--torch-python PATH] [--monitor-seconds 10] [--timeout 300] [--jsonl FILE]
//
// Each simulated worker (rank r, node r / per-node, its own loopback address per node):
//   1. connects and sends VALIDATE, then PING (waits for the echo): torch 2.5+'s handshake;
//   2. ADD "init/" 1 (the worker's TCPStore constructor);
//   3. rank 0 SETs the 128-byte NCCL unique id "/default_pg/0//cuda//0"; every other rank WAITs for it and
//      GETs it;
//   4. gloo's rendezvous in a group of `--group` consecutive ranks: SET its 64-byte address, WAIT for the
//      group's keys, MULTI_GET them (gloo's batched form);
// and is done. The figure is the time from the first connect until the last rank is done. Then the
// steady load of NCCL's monitor: every rank sends one CHECK a second for --monitor-seconds, and node
// 0's CPU over that window is reported (the server process, and the relays' separately).
//
// Internal modes (the processes the run starts): --serve-agent (a C10dServer on 127.0.0.1),
// --serve-relays FIRST COUNT UPSTREAM_PORT (the relays of nodes FIRST.., on one event loop, on 127.3.x.y,
// each connecting from its node's address), --sim-shard (a share of the simulated workers, driven over its
// standard input). Every serving process prints its port(s), then serves until its standard input closes.
// No process holds more descriptors than RLIMIT_NOFILE allows (its hard limit is all an unprivileged
// user gets): the workers and the relays are spread over as many processes as that takes; a server that
// would need more connections than the limit is skipped with the reason.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "store/c10d_codec.hpp"
#include "store/c10d_server.hpp"
#include "store/error.hpp"

namespace c10d = ddprun::store::c10d;
namespace store = ddprun::store;
using Clock = std::chrono::steady_clock;

namespace {

double secs(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Every socket of 131,072 workers, their servers and relays: far above any default limit.
std::uint64_t raise_fds() {
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
std::string node_addr(int net, int n) {
  return "127." + std::to_string(net) + "." + std::to_string((n >> 8) & 255) + "." + std::to_string(n & 255);
}

void wait_stdin_eof() {
  char b[256];
  while (::read(0, b, sizeof b) > 0) {
  }
}

int serve_agent() {
  raise_fds();
  store::C10dServerOptions o;
  o.hosts = {"127.0.0.1"};
  o.max_connections = 1u << 20;
  store::C10dServer s(o);
  std::printf("%u\n", s.port());
  std::fflush(stdout);
  wait_stdin_eof();
  return 0;
}

int serve_relays(int first, int count, int upstream) {
  raise_fds();
  auto loop = std::make_shared<store::C10dLoop>();
  std::vector<std::unique_ptr<store::C10dRelay>> relays;
  for (int i = first; i < first + count; ++i) {
    store::C10dRelayOptions o;
    o.host = node_addr(3, i);
    o.source_host = node_addr(2, i);
    o.upstream_host = "127.0.0.1";
    o.upstream_port = static_cast<std::uint16_t>(upstream);
    o.max_connections = 1u << 20;
    o.loop = loop;
    relays.push_back(std::make_unique<store::C10dRelay>(o));
  }
  std::string ports;
  for (auto& r : relays) ports += std::to_string(r->port()) + "\n";
  std::fputs(ports.c_str(), stdout);
  std::fflush(stdout);
  wait_stdin_eof();
  return 0;
}

// A child process whose stdin we hold (closing it ends the child) and whose stdout gave its port(s).
struct Child {
  pid_t pid = -1;
  int to = -1;
  FILE* from = nullptr;
  std::vector<int> ports;
  bool start(const std::vector<std::string>& argv, std::size_t nports) {
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) return false;
    pid = ::fork();
    if (pid == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      std::vector<char*> a;
      for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
      a.push_back(nullptr);
      ::execv(a[0], a.data());
      std::perror("execv");
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    to = in[1];
    from = ::fdopen(out[0], "r");
    for (std::size_t i = 0; i < nports; ++i) {
      int p = 0;
      if (std::fscanf(from, "%d", &p) != 1) return false;
      ports.push_back(p);
    }
    return true;
  }
  // utime + stime of the process, in seconds.
  double cpu() const {
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const auto rp = s.rfind(')');
    if (rp == std::string::npos) return 0;
    std::istringstream in(s.substr(rp + 2));
    std::string field;
    double ut = 0, st = 0;
    for (int i = 3; i <= 15; ++i) {
      in >> field;
      if (i == 14) ut = std::stod(field);
      if (i == 15) st = std::stod(field);
    }
    return (ut + st) / static_cast<double>(::sysconf(_SC_CLK_TCK));
  }
  long rss_kb() const {
    std::ifstream f("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind("VmHWM:", 0) == 0) return std::atol(line.c_str() + 6);
    }
    return 0;
  }
  void stop() {
    if (pid <= 0) return;
    ::close(to);
    for (int i = 0; i < 200; ++i) {
      int st = 0;
      if (::waitpid(pid, &st, WNOHANG) == pid) {
        pid = -1;
        break;
      }
      ::usleep(50000);
    }
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    if (from) std::fclose(from);
    pid = -1;
  }
};

// ---- the simulated workers ----

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

struct Result {
  int n = 0;
  std::string server;
  bool ok = false;
  double init_s = 0, connected_s = 0;
  double server_cpu_s = 0, relay_cpu_s = 0;
  long server_rss_kb = 0, relay_rss_kb = 0;
  double monitor_core = 0, monitor_relay_core = 0;
  std::uint64_t errors = 0;
  int done = 0;
  std::string skipped;  // why it did not run
};

std::string fmt_skip(std::uint64_t conns, std::uint64_t limit) {
  return "skipped: node 0 would hold " + std::to_string(conns) + " connections, above RLIMIT_NOFILE " +
         std::to_string(limit) + " (its hard limit here)";
}

// NCCL's monitor on this process's ranks: one CHECK a rank a second, spread over the second; then
// until every answer is in (5 s at most).
void monitor(Sim& sim, int seconds) {
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
int sim_shard() {
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

void say(const Child& c, const std::string& text) {
  if (::write(c.to, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    std::fprintf(stderr, "c10d_scale: a simulation process went away\n");
  }
}

Result run_one(const std::string& self, const std::string& server, int n, int per_node, int group,
               const std::string& torch_python, int monitor_s, int timeout_s, std::uint64_t fd_limit) {
  Result res;
  res.n = n;
  res.server = server;
  const int nodes = (n + per_node - 1) / per_node;
  const bool relay = server == "relay";
  // Descriptors each process may use, with room for its own files and pipes.
  const std::uint64_t room = fd_limit > 256 ? fd_limit - 256 : 0;
  const std::uint64_t node0_conns =
      relay ? static_cast<std::uint64_t>(nodes - 1 + per_node) : static_cast<std::uint64_t>(n);
  if (node0_conns > room) {
    res.skipped = fmt_skip(node0_conns, fd_limit);
    return res;
  }
  Child srv;
  std::vector<Child> rels;
  bool started = false;
  if (server == "torch") {
    started = srv.start({torch_python, "-c",
                         "import sys, datetime, torch.distributed as d\n"
                         "s = d.TCPStore('127.0.0.1', 0, None, True, datetime.timedelta(seconds=900), "
                         "wait_for_workers=False, use_libuv=True)\n"
                         "print(s.port, flush=True)\nsys.stdin.read()\n"},
                        1);
  } else {
    started = srv.start({self, "--serve-agent"}, 1);
  }
  if (!started) {
    std::fprintf(stderr, "c10d_scale: the %s server did not start\n", server.c_str());
    return res;
  }
  std::vector<int> relay_ports;
  if (relay) {
    // A relay holds its listener, a timer, a spare descriptor, its upstream connection and its node's
    // workers.
    const int per_proc =
        static_cast<int>(std::max<std::uint64_t>(1, room / static_cast<std::uint64_t>(per_node + 4)));
    for (int first = 1; first < nodes; first += per_proc) {
      const int count = std::min(per_proc, nodes - first);
      rels.emplace_back();
      if (!rels.back().start({self, "--serve-relays", std::to_string(first), std::to_string(count),
                              std::to_string(srv.ports[0])},
                             static_cast<std::size_t>(count))) {
        std::fprintf(stderr, "c10d_scale: the relays did not start\n");
        for (auto& r : rels) r.stop();
        srv.stop();
        return res;
      }
      relay_ports.insert(relay_ports.end(), rels.back().ports.begin(), rels.back().ports.end());
    }
  }
  std::string ports_line;
  for (const int p : relay_ports) ports_line += std::to_string(p) + " ";
  // The simulated workers: whole nodes per process, as many as its descriptors allow.
  const int per_shard =
      std::max(per_node, static_cast<int>(std::min<std::uint64_t>(room, 16384)) / per_node * per_node);
  std::vector<Child> shards;
  for (int first = 0; first < n; first += per_shard) {
    shards.emplace_back();
    shards.back().start({self, "--sim-shard"}, 0);
    say(shards.back(),
        fmt::format("{} {} {} {} {} {} {} {} {}\n{}\n", n, first, std::min(per_shard, n - first), per_node,
                    group, relay ? 1 : 0, srv.ports[0], timeout_s, monitor_s, ports_line));
  }
  auto cpu_of = [](const std::vector<Child>& cs) {
    double t = 0;
    for (const auto& c : cs) t += c.cpu();
    return t;
  };
  ::usleep(200000);  // the shards have read their parameters and made their epoll sets
  const double cpu0 = srv.cpu();
  const double rcpu0 = cpu_of(rels);
  const auto t0 = Clock::now();
  for (auto& sh : shards) say(sh, "go\n");
  res.ok = true;
  for (auto& sh : shards) {
    int ok = 0, done = 0;
    unsigned long long errors = 0;
    double conn = 0;
    if (std::fscanf(sh.from, " done %d %d %llu %lf", &ok, &done, &errors, &conn) != 4) ok = 0;
    res.ok = res.ok && ok != 0;
    res.done += done;
    res.errors += errors;
    res.connected_s = std::max(res.connected_s, conn);
  }
  res.init_s = secs(Clock::now() - t0);
  res.server_cpu_s = srv.cpu() - cpu0;
  res.relay_cpu_s = cpu_of(rels) - rcpu0;
  if (res.ok && monitor_s > 0) {
    const double m0 = srv.cpu(), r0 = cpu_of(rels);
    const auto start = Clock::now();
    for (auto& sh : shards) say(sh, "monitor\n");
    char word[8] = {};
    for (auto& sh : shards) {
      if (std::fscanf(sh.from, " %7s", word) != 1) res.ok = false;
    }
    const double window = secs(Clock::now() - start);
    res.monitor_core = (srv.cpu() - m0) / window;
    res.monitor_relay_core = relay ? (cpu_of(rels) - r0) / window : 0;
  }
  res.server_rss_kb = srv.rss_kb();
  for (const auto& r : rels) res.relay_rss_kb += r.rss_kb();
  for (auto& sh : shards) sh.stop();
  for (auto& r : rels) r.stop();
  srv.stop();
  return res;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, ',')) out.push_back(part);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  if (argc >= 2 && std::strcmp(argv[1], "--serve-agent") == 0) return serve_agent();
  if (argc >= 5 && std::strcmp(argv[1], "--serve-relays") == 0) {
    return serve_relays(std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]));
  }
  if (argc >= 2 && std::strcmp(argv[1], "--sim-shard") == 0) return sim_shard();
  std::vector<int> sizes{16384, 65536, 131072};
  std::vector<std::string> servers{"agent", "relay", "torch"};
  int per_node = 8, group = 8, monitor_s = 10, timeout_s = 300;
  std::string torch_python, jsonl;
  if (const char* t = std::getenv("DDPRUN_TORCH2_PYTHON")) torch_python = t;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "";
    if (a == "--sizes") {
      sizes.clear();
      for (const auto& s : split(v)) sizes.push_back(std::stoi(s));
      ++i;
    } else if (a == "--servers") {
      servers = split(v);
      ++i;
    } else if (a == "--per-node") {
      per_node = std::atoi(v), ++i;
    } else if (a == "--group") {
      group = std::atoi(v), ++i;
    } else if (a == "--torch-python") {
      torch_python = v, ++i;
    } else if (a == "--monitor-seconds") {
      monitor_s = std::atoi(v), ++i;
    } else if (a == "--timeout") {
      timeout_s = std::atoi(v), ++i;
    } else if (a == "--jsonl") {
      jsonl = v, ++i;
    } else {
      std::fprintf(stderr,
                   "c10d_scale: unknown argument %s (see the comment at the top of bench/c10d_scale.cpp)\n",
                   a.c_str());
      return 2;
    }
  }
  const std::uint64_t fd_limit = raise_fds();
  char self[4096] = {};
  const ssize_t len = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) return 1;
  std::FILE* out = jsonl.empty() ? nullptr : std::fopen(jsonl.c_str(), "a");
  std::printf("%8s %-6s %9s %9s %10s %10s %9s %12s %12s %7s\n", "ranks", "store", "init (s)", "conn (s)",
              "node0 cpu", "relay cpu", "rss (MB)", "monitor core", "relay core", "errors");
  for (const int n : sizes) {
    for (const auto& server : servers) {
      if (server == "torch" && torch_python.empty()) {
        std::printf("%8d %-6s skipped: no --torch-python (or DDPRUN_TORCH2_PYTHON)\n", n, server.c_str());
        continue;
      }
      const Result r =
          run_one(self, server, n, per_node, group, torch_python, monitor_s, timeout_s, fd_limit);
      if (!r.skipped.empty()) {
        std::printf("%8d %-6s %s\n", n, server.c_str(), r.skipped.c_str());
        std::fflush(stdout);
        continue;
      }
      std::printf("%8d %-6s %9.2f %9.2f %10.2f %10.2f %9.1f %12.3f %12.3f %7llu%s\n", n, server.c_str(),
                  r.init_s, r.connected_s, r.server_cpu_s, r.relay_cpu_s,
                  static_cast<double>(r.server_rss_kb) / 1024.0, r.monitor_core, r.monitor_relay_core,
                  static_cast<unsigned long long>(r.errors),
                  r.ok ? "" : (" TIMEOUT: " + std::to_string(r.done) + " done").c_str());
      std::fflush(stdout);
      if (out) {
        std::fprintf(
            out,
            "{\"ranks\":%d,\"store\":\"%s\",\"ok\":%s,\"done\":%d,\"init_s\":%.3f,\"connected_s\":%.3f,"
            "\"node0_cpu_s\":%.3f,\"relay_cpu_s\":%.3f,\"node0_rss_mb\":%.1f,\"relay_rss_mb\":%.1f,"
            "\"monitor_core\":%.4f,\"monitor_relay_core\":%.4f,\"errors\":%llu,\"per_node\":%d,\"group\":%d}"
            "\n",
            r.n, r.server.c_str(), r.ok ? "true" : "false", r.done, r.init_s, r.connected_s, r.server_cpu_s,
            r.relay_cpu_s, static_cast<double>(r.server_rss_kb) / 1024.0,
            static_cast<double>(r.relay_rss_kb) / 1024.0, r.monitor_core, r.monitor_relay_core,
            static_cast<unsigned long long>(r.errors), per_node, group);
        std::fflush(out);
      }
    }
  }
  if (out) std::fclose(out);
  return 0;
}
