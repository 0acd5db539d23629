// The workers' store at scale (docs/scale.md, "The workers' store"): simulated workers that speak
// PyTorch's TCPStore protocol and do what init_process_group does, against ddprun's store (node 0's
// agent, and with relays) and against torch 2.x's libuv TCPStore server, in one run.
//
//   c10d_scale [--sizes 16384,65536,131072] [--servers agent,relay,torch] [--repeat 1] [--per-node 8]
//              [--group 8] [--torch-python PATH] [--monitor-seconds 10] [--timeout 300] [--jsonl FILE]
//
// --repeat runs every store that many times for each size, interleaved (A B A B ...), so that a change in
// the machine's load touches each alike. (At a922988, --loops epoll,asio also ran ddprun's stores on a
// hand-written epoll loop beside Asio's: docs/architecture.md, "Why the workers' store runs on Asio".)
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
// --serve-relays FIRST COUNT UPSTREAM_PORT (the relays of nodes FIRST.., on one event loop, on
// 127.3.x.y, each connecting from its node's address), --sim-shard (a share of the simulated workers, driven
// over its standard input). Every serving process prints its port(s), then serves until its standard input
// closes. No process holds more descriptors than RLIMIT_NOFILE allows (its hard limit is all an unprivileged
// user gets): the workers and the relays are spread over as many processes as that takes; a server that
// would need more connections than the limit is skipped with the reason.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "c10d_sim.hpp"
#include "sim_proc.hpp"
#include "store/c10d_server.hpp"

namespace store = ddprun::store;
using namespace c10d_bench;

namespace {

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
  double cpu() const { return sim::proc::proc_cpu_s(pid); }
  long rss_kb() const { return sim::proc::proc_status_kb(pid, "VmHWM:"); }
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

struct Result {
  int n = 0;
  std::string server;
  bool ok = false;
  double init_s = 0, connected_s = 0;
  double server_cpu_s = 0, relay_cpu_s = 0, sim_cpu_s = 0;  // node 0, the relays, the simulated workers
  long server_rss_kb = 0, relay_rss_kb = 0;
  double monitor_core = 0, monitor_relay_core = 0;
  std::uint64_t errors = 0;
  int done = 0;
  std::string skipped;  // why it did not run
};

struct Args {
  std::vector<int> sizes{16384, 65536, 131072};
  std::vector<std::string> servers{"agent", "relay", "torch"};
  int per_node = 8, group = 8, monitor_s = 10, timeout_s = 300, repeat = 1;
  std::string torch_python, jsonl;
};

struct Run {
  const std::string& self;
  const Args& args;
  std::uint64_t fd_limit;
  // Descriptors each process may use, with room for its own files and pipes.
  std::uint64_t room() const { return fd_limit > 256 ? fd_limit - 256 : 0; }
};

void say(const Child& c, const std::string& text) {
  if (::write(c.to, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    std::fprintf(stderr, "c10d_scale: a simulation process went away\n");
  }
}

bool start_server(const Run& run, const std::string& server, Child& srv) {
  if (server == "torch") {
    return srv.start({run.args.torch_python, "-c",
                      "import sys, datetime, torch.distributed as d\n"
                      "s = d.TCPStore('127.0.0.1', 0, None, True, datetime.timedelta(seconds=900), "
                      "wait_for_workers=False, use_libuv=True)\n"
                      "print(s.port, flush=True)\nsys.stdin.read()\n"},
                     1);
  }
  return srv.start({run.self, "--serve-agent"}, 1);
}

// The relays of nodes 1.., as many per process as its descriptors allow (a relay holds its listener, a
// timer, its upstream connection and its node's workers); their ports, in node order.
bool start_relays(const Run& run, int nodes, int upstream, std::vector<Child>& rels,
                  std::vector<int>& ports) {
  const int per_proc = static_cast<int>(
      std::max<std::uint64_t>(1, run.room() / static_cast<std::uint64_t>(run.args.per_node + 4)));
  for (int first = 1; first < nodes; first += per_proc) {
    const int count = std::min(per_proc, nodes - first);
    rels.emplace_back();
    if (!rels.back().start({run.self, "--serve-relays", std::to_string(first), std::to_string(count),
                            std::to_string(upstream)},
                           static_cast<std::size_t>(count))) {
      return false;
    }
    ports.insert(ports.end(), rels.back().ports.begin(), rels.back().ports.end());
  }
  return true;
}

// The simulated workers: whole nodes per process, as many as its descriptors allow.
std::vector<Child> start_shards(const Run& run, int n, bool relay, int server_port,
                                const std::vector<int>& ports) {
  const Args& a = run.args;
  std::string ports_line;
  for (const int p : ports) ports_line += std::to_string(p) + " ";
  const int per_shard = std::max(
      a.per_node, static_cast<int>(std::min<std::uint64_t>(run.room(), 16384)) / a.per_node * a.per_node);
  std::vector<Child> shards;
  for (int first = 0; first < n; first += per_shard) {
    shards.emplace_back();
    shards.back().start({run.self, "--sim-shard"}, 0);
    say(shards.back(),
        fmt::format("{} {} {} {} {} {} {} {} {}\n{}\n", n, first, std::min(per_shard, n - first), a.per_node,
                    a.group, relay ? 1 : 0, server_port, a.timeout_s, a.monitor_s, ports_line));
  }
  return shards;
}

double cpu_of(const std::vector<Child>& cs) {
  double t = 0;
  for (const auto& c : cs) t += c.cpu();
  return t;
}

// Starts the shards at once and reads each one's "done" line: the init figures.
void measure_init(Result& res, Child& srv, std::vector<Child>& rels, std::vector<Child>& shards) {
  ::usleep(200000);  // the shards have read their parameters and made their epoll sets
  const double cpu0 = srv.cpu();
  const double rcpu0 = cpu_of(rels);
  const double scpu0 = cpu_of(shards);
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
  res.sim_cpu_s = cpu_of(shards) - scpu0;
}

void measure_monitor(Result& res, Child& srv, std::vector<Child>& rels, std::vector<Child>& shards) {
  const double m0 = srv.cpu(), r0 = cpu_of(rels);
  const auto start = Clock::now();
  for (auto& sh : shards) say(sh, "monitor\n");
  char word[8] = {};
  for (auto& sh : shards) {
    if (std::fscanf(sh.from, " %7s", word) != 1) res.ok = false;
  }
  const double window = secs(Clock::now() - start);
  res.monitor_core = (srv.cpu() - m0) / window;
  res.monitor_relay_core = rels.empty() ? 0 : (cpu_of(rels) - r0) / window;
}

Result run_one(const Run& run, const std::string& server, int n) {
  const Args& a = run.args;
  Result res;
  res.n = n;
  res.server = server;
  const int nodes = (n + a.per_node - 1) / a.per_node;
  const bool relay = server == "relay";
  const std::uint64_t node0_conns =
      relay ? static_cast<std::uint64_t>(nodes - 1 + a.per_node) : static_cast<std::uint64_t>(n);
  if (node0_conns > run.room()) {
    res.skipped =
        fmt::format("skipped: node 0 would hold {} connections, above RLIMIT_NOFILE {} (its hard limit here)",
                    node0_conns, run.fd_limit);
    return res;
  }
  Child srv;
  if (!start_server(run, server, srv)) {
    std::fprintf(stderr, "c10d_scale: the %s server did not start\n", server.c_str());
    return res;
  }
  std::vector<Child> rels;
  std::vector<int> relay_ports;
  if (relay && !start_relays(run, nodes, srv.ports[0], rels, relay_ports)) {
    std::fprintf(stderr, "c10d_scale: the relays did not start\n");
    for (auto& r : rels) r.stop();
    srv.stop();
    return res;
  }
  std::vector<Child> shards = start_shards(run, n, relay, srv.ports[0], relay_ports);
  measure_init(res, srv, rels, shards);
  if (res.ok && a.monitor_s > 0) measure_monitor(res, srv, rels, shards);
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

// Returns false (with the message printed) for an argument it does not know.
bool parse_args(int argc, char** argv, Args& a) {
  if (const char* t = std::getenv("DDPRUN_TORCH2_PYTHON")) a.torch_python = t;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    const std::string v = i + 1 < argc ? argv[i + 1] : "";
    ++i;
    if (k == "--sizes") {
      a.sizes.clear();
      for (const auto& s : split(v)) a.sizes.push_back(std::stoi(s));
    } else if (k == "--servers") {
      a.servers = split(v);
    } else if (k == "--repeat") {
      a.repeat = std::max(1, std::atoi(v.c_str()));
    } else if (k == "--per-node") {
      a.per_node = std::atoi(v.c_str());
    } else if (k == "--group") {
      a.group = std::atoi(v.c_str());
    } else if (k == "--torch-python") {
      a.torch_python = v;
    } else if (k == "--monitor-seconds") {
      a.monitor_s = std::atoi(v.c_str());
    } else if (k == "--timeout") {
      a.timeout_s = std::atoi(v.c_str());
    } else if (k == "--jsonl") {
      a.jsonl = v;
    } else {
      std::fprintf(stderr,
                   "c10d_scale: unknown argument %s (see the comment at the top of bench/c10d_scale.cpp)\n",
                   k.c_str());
      return false;
    }
  }
  return true;
}

void print_row(const Result& r) {
  if (!r.skipped.empty()) {
    std::printf("%8d %-6s %s\n", r.n, r.server.c_str(), r.skipped.c_str());
  } else {
    std::printf("%8d %-6s %9.2f %9.2f %10.2f %10.2f %10.2f %9.1f %12.3f %12.3f %7llu%s\n", r.n,
                r.server.c_str(), r.init_s, r.connected_s, r.server_cpu_s, r.relay_cpu_s, r.sim_cpu_s,
                static_cast<double>(r.server_rss_kb) / 1024.0, r.monitor_core, r.monitor_relay_core,
                static_cast<unsigned long long>(r.errors),
                r.ok ? "" : (" TIMEOUT: " + std::to_string(r.done) + " done").c_str());
  }
  std::fflush(stdout);
}

void write_jsonl(std::FILE* out, const Result& r, const Args& a) {
  if (out == nullptr || !r.skipped.empty()) return;
  std::fprintf(out,
               "{\"ranks\":%d,\"store\":\"%s\",\"ok\":%s,\"done\":%d,\"init_s\":%.3f,"
               "\"connected_s\":%.3f,\"node0_cpu_s\":%.3f,\"relay_cpu_s\":%.3f,\"sim_cpu_s\":%.3f,\"node0_"
               "rss_mb\":%.1f,"
               "\"relay_rss_mb\":%.1f,\"monitor_core\":%.4f,\"monitor_relay_core\":%.4f,\"errors\":%llu,"
               "\"per_node\":%d,\"group\":%d}\n",
               r.n, r.server.c_str(), r.ok ? "true" : "false", r.done, r.init_s, r.connected_s,
               r.server_cpu_s, r.relay_cpu_s, r.sim_cpu_s, static_cast<double>(r.server_rss_kb) / 1024.0,
               static_cast<double>(r.relay_rss_kb) / 1024.0, r.monitor_core, r.monitor_relay_core,
               static_cast<unsigned long long>(r.errors), a.per_node, a.group);
  std::fflush(out);
}

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  if (argc >= 2 && std::strcmp(argv[1], "--serve-agent") == 0) return serve_agent();
  if (argc >= 5 && std::strcmp(argv[1], "--serve-relays") == 0) {
    return serve_relays(std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]));
  }
  if (argc >= 2 && std::strcmp(argv[1], "--sim-shard") == 0) return sim_shard();
  Args args;
  if (!parse_args(argc, argv, args)) return 2;
  const std::uint64_t fd_limit = raise_fds();
  char self[4096] = {};
  const ssize_t len = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) return 1;
  const std::string self_path = self;
  const Run run{self_path, args, fd_limit};
  std::FILE* out = args.jsonl.empty() ? nullptr : std::fopen(args.jsonl.c_str(), "a");
  std::printf("%8s %-6s %9s %9s %10s %10s %10s %9s %12s %12s %7s\n", "ranks", "store", "init (s)", "conn (s)",
              "node0 cpu", "relay cpu", "sim cpu", "rss (MB)", "monitor core", "relay core", "errors");
  // Each round runs every store once, side by side, so that a change in the machine's load touches
  // them alike.
  for (const int n : args.sizes) {
    for (int round = 0; round < args.repeat; ++round) {
      for (const auto& server : args.servers) {
        if (server == "torch" && args.torch_python.empty()) {
          if (round == 0) {
            std::printf("%8d %-6s skipped: no --torch-python (or DDPRUN_TORCH2_PYTHON)\n", n, server.c_str());
          }
          continue;
        }
        const Result r = run_one(run, server, n);
        print_row(r);
        write_jsonl(out, r, args);
      }
    }
  }
  if (out) std::fclose(out);
  return 0;
}
