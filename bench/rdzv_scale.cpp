// Rendezvous at scale: a real `ddprun` master (node rank 0, a child process) and N-1 simulated
// agents (bench/sim_agent.hpp) on one or two threads, through the real protocol with token auth.
// Per N and scenario (abort | barrier) it measures: time until the last agent holds its plan, the
// abort's or the exit barrier's time to reach every agent, the master's CPU and peak RSS, bytes
// received per agent, and the master's idle CPU with every agent heartbeating.
// --real-agent: node rank 1 is a real `ddprun` agent too (its workers /bin/true, or /bin/sleep until
// the abort), and its peak RSS, the bytes it received from the store (counted by a relay between it and
// the master, tests/support/byte_proxy.hpp) and the bytes its own threads read are reported.
// Figures only, never a pass/fail: see docs/scale.md and bench/rdzv_scale.sh; --help for the options.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "sim_agent.hpp"
#include "sim_proc.hpp"
#include "support/byte_proxy.hpp"

namespace {

using namespace std::chrono_literals;
using sim::Scenario;
using sim::proc::free_port;
using sim::proc::master_exited;
using sim::proc::proc_cpu_s;
using sim::proc::proc_status_kb;
using sim::proc::wait_listening;
namespace asio = boost::asio;

struct Options {
  std::string ddprun;
  int threads = 1;
  double idle_s = 3;
  std::vector<Scenario> scenarios{Scenario::abort, Scenario::barrier};
  std::string json;
  long rss_cap_mb = 4000;  // the master is killed above this (it would take the machine down)
  std::vector<int> sizes;
  bool one_conn = true;  // --protocol one-conn (today's), two-conn (before issue 16)
  int ramp_ms = 0;
  bool scattered_hosts = false;
  bool real_agent = false;  // node rank 1 is a real ddprun agent, measured
  int gpus = -1;            // GPUs per node; -1: 8 with --real-agent, else none
};

constexpr const char* kUsage = R"(usage: rdzv_scale [options] N...
A real ddprun master (node rank 0) and N-1 simulated agents on loopback, token auth; per N and
scenario, figures only (docs/scale.md, "The simulation"). Sizes default to 256 1024 4096 16384.
  --ddprun PATH          the ddprun to run (default: ../launcher/ddprun next to this program)
  --protocol P           one-conn (today's) or two-conn (before issue 16)
  --threads T            io_context threads for the simulated agents (default 1)
  --idle S               window for the idle master's CPU, seconds (default 3)
  --scenarios LIST       abort,barrier (default both)
  --json FILE            append one JSON line per run
  --rss-cap-mb M         kill the master above M MB of RSS (default 4000)
  --ramp-ms R            spread the agents' starts over R ms (default 0: all at once)
  --scattered-hosts      host names that fold into no hostlist (the plan's worst case)
  --gpus G               GPU ids each node reports (default 0; 8 with --real-agent)
  --real-agent           node rank 1 is a real ddprun agent (workers /bin/true; /bin/sleep until the
                         abort), 8 GPUs a node unless --gpus: reports its peak RSS (VmHWM, sampled
                         every 10 ms), the bytes it received from the store (its connection runs
                         through a counting relay) and the bytes its own threads read from files and
                         pipes (rchar of /proc/PID/task/*/io, without its reaped workers)
Simulated agents are hosts sim1..simN, each its own loopback address, as real agents are their own hosts.
)";

struct Result {
  int n = 0;
  bool one_conn = false;
  Scenario scenario{};
  int failed = 0;
  std::string first_error;
  double plan_s = -1, end_s = -1;  // end: the abort reaching all, or the exit barrier
  int reached = 0;                 // agents the abort or the barrier reached
  int early_aborts = 0;            // aborts seen before the go (the master declared someone lost)
  double master_cpu_s = 0, idle_cpu = -1;
  long master_hwm_kb = 0;
  std::uint64_t bytes_max = 0, bytes_mean = 0, plan_bytes = 0;
  int master_status = -1;
  std::string note;
  // --real-agent: the agent at node rank 1.
  pid_t agent_pid = -1;
  long agent_hwm_kb = 0;
  std::map<int, std::uint64_t> agent_thread_rchar;  // per thread id, the largest sampled
  std::uint64_t agent_rchar = 0;                    // their sum: what the agent's own threads read
  std::uint64_t agent_rx = 0, agent_tx = 0;         // bytes on its store connection(s), from the relay
  int agent_status = -1;
};

// rchar of a /proc io file: the bytes read() returned (files and pipes; not recv() on sockets).
std::uint64_t rchar_of(const std::string& path) {
  std::ifstream f(path);
  std::string key;
  std::uint64_t v = 0;
  while (f >> key >> v) {
    if (key == "rchar:") return v;
  }
  return 0;
}

// The agent's own reads: per thread (/proc/PID/task/TID/io). /proc/PID/io would also count every
// worker the agent reaped (Linux adds a reaped child's counters to its parent's): the kernel's reads
// of each worker's executable at exec and its dynamic loader's, about 4 KB a worker of /bin/true.
void sample_agent_reads(Result& r) {
  const std::string dir = fmt::format("/proc/{}/task", r.agent_pid);
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    auto& v = r.agent_thread_rchar[std::atoi(e->d_name)];
    v = std::max(v, rchar_of(dir + "/" + e->d_name + "/io"));
  }
  ::closedir(d);
  std::uint64_t sum = 0;
  for (const auto& [tid, v] : r.agent_thread_rchar) sum += v;
  r.agent_rchar = sum;
}

void sample_agent(Result& r) {
  if (r.agent_pid <= 0) return;
  r.agent_hwm_kb = std::max(r.agent_hwm_kb, proc_status_kb(r.agent_pid, "VmHWM:"));
  sample_agent_reads(r);
}

// A real ddprun at `node_rank` running `cmd` as its workers, its output to `log`; it finds the store at
// `port` (the master's, or a relay's in front of it).
pid_t spawn_ddprun(const Options& o, const sim::Config& c, int node_rank, const std::vector<std::string>& cmd,
                   const std::string& log, std::uint16_t port) {
  std::fflush(stdout);  // the child must not print our buffered table again
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  std::FILE* f = std::freopen(log.c_str(), "w", stdout);
  if (f) ::dup2(::fileno(stdout), 2);
  ::setenv("DDPRUN_TOKEN", c.token.c_str(), 1);
  if (c.gpus > 0) {
    std::string ids;
    for (int g = 0; g < c.gpus; ++g) ids += fmt::format("{}{}", g ? "," : "", g);
    ::setenv("CUDA_VISIBLE_DEVICES", ids.c_str(), 1);
  }
  std::vector<std::string> args = {o.ddprun,
                                   "--nnodes",
                                   std::to_string(c.nnodes),
                                   "--node-rank",
                                   std::to_string(node_rank),
                                   "--rdzv-endpoint",
                                   fmt::format("127.0.0.1:{}", port),
                                   "--rdzv-id",
                                   c.run_id,
                                   "--rdzv-auth",
                                   "token",
                                   "--rdzv-timeout",
                                   "600",
                                   "--nproc-per-node",
                                   std::to_string(c.nproc),
                                   "--"};
  args.insert(args.end(), cmd.begin(), cmd.end());
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(argv[0], argv.data());
  std::perror("execv ddprun");
  ::_exit(127);
}

// Samples the master while `until` is false; kills it above the RSS cap.
template <typename Pred>
bool watch_master(pid_t pid, Result& r, const Options& o, std::chrono::seconds limit, Pred until,
                  bool stop_on_exit = true) {
  const auto end = sim::Clock::now() + limit;
  while (!until()) {
    sample_agent(r);
    r.master_hwm_kb = std::max(r.master_hwm_kb, proc_status_kb(pid, "VmHWM:"));
    if (proc_status_kb(pid, "VmRSS:") > o.rss_cap_mb * 1024) {
      ::kill(pid, SIGKILL);
      r.note = fmt::format("master killed: RSS over {} MB", o.rss_cap_mb);
      return false;
    }
    if (sim::Clock::now() > end) return false;
    if (stop_on_exit && master_exited(pid)) {
      if (r.note.empty()) r.note = "the master exited";
      return false;
    }
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

struct Reaped {
  int status = -1;  // exit code, or 128 + signal
  rusage ru{};
  bool killed = false;  // it had not exited within the limit
};

// Waits for child `pid` up to `limit` (calling `tick` every 10 ms meanwhile), then SIGKILLs it.
template <typename Tick>
Reaped reap(pid_t pid, std::chrono::seconds limit, Tick tick) {
  Reaped out;
  int status = 0;
  const auto end = sim::Clock::now() + limit;
  pid_t got = 0;
  for (;;) {
    tick();
    if ((got = ::wait4(pid, &status, WNOHANG, &out.ru)) != 0 || sim::Clock::now() > end) break;
    std::this_thread::sleep_for(10ms);
  }
  if (got == 0) {
    ::kill(pid, SIGKILL);
    ::wait4(pid, &status, 0, &out.ru);
    out.killed = true;
  }
  out.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return out;
}

// The master's peak RSS is its VmHWM as watch_master sampled it: wait4's ru_maxrss would also count this
// simulator's pages, which the forked child held until its exec (tens of MB after a large run).
void reap_master(pid_t pid, Result& r) {
  const Reaped m = reap(pid, 60s, [] {});
  if (m.killed) r.note += r.note.empty() ? "master did not exit in 60 s" : "; master did not exit";
  r.master_cpu_s = static_cast<double>(m.ru.ru_utime.tv_sec + m.ru.ru_stime.tv_sec) +
                   static_cast<double>(m.ru.ru_utime.tv_usec + m.ru.ru_stime.tv_usec) / 1e6;
  r.master_status = m.status;
}

// The real agent: its end (at most `limit`, then killed), its peak RSS and the bytes it read. The peak
// is its VmHWM sampled every 10 ms while it lives (sample_agent), not wait4's ru_maxrss: that also
// counts this simulator's pages, which the forked child held until its exec.
void reap_agent(Result& r, std::chrono::seconds limit) {
  if (r.agent_pid <= 0) return;
  const Reaped a = reap(r.agent_pid, limit, [&r] { sample_agent(r); });  // a zombie's io still reads
  if (a.killed)
    r.note += r.note.empty() ? "real agent did not exit in time" : "; real agent did not exit in time";
  r.agent_status = a.status;
  r.agent_pid = -1;
}

// Over the simulated agents, ranks first..n-1.
void summarize(const sim::Run& run, std::size_t first, std::int64_t t0, std::int64_t t_go, Result& r) {
  std::int64_t last_plan = 0, last_end = 0;
  std::uint64_t sum = 0;
  int agents = 0;
  for (std::size_t i = first; i < run.stats.size(); ++i) {
    const auto& s = run.stats[i];
    ++agents;
    if (!s.error.empty() && r.first_error.empty()) r.first_error = fmt::format("agent {}: {}", i, s.error);
    last_plan = std::max(last_plan, s.plan_ns);
    const std::int64_t end = r.scenario == Scenario::abort ? s.abort_ns : s.barrier_ns;
    if (s.abort_ns > 0 && (t_go == 0 || s.abort_ns < t_go)) ++r.early_aborts;
    if (end >= t_go && t_go > 0) {
      ++r.reached;
      last_end = std::max(last_end, end);
    }
    r.bytes_max = std::max<std::uint64_t>(r.bytes_max, s.bytes);
    sum += s.bytes;
    r.plan_bytes = std::max<std::uint64_t>(r.plan_bytes, s.plan_bytes);
  }
  r.failed = run.failed.load();
  r.bytes_mean = agents ? sum / static_cast<std::uint64_t>(agents) : 0;
  if (run.plans.load() == agents && agents > 0) r.plan_s = static_cast<double>(last_plan - t0) / 1e9;
  const std::int64_t from = r.scenario == Scenario::abort ? run.abort_t0.load() : t_go;
  if (r.reached == agents && agents > 0 && from > 0) r.end_s = static_cast<double>(last_end - from) / 1e9;
}

Result run_one(const Options& o, int n, Scenario sc) {
  Result r;
  r.n = n;
  r.one_conn = o.one_conn;
  r.scenario = sc;
  sim::Run run;
  run.cfg.port = free_port();
  run.cfg.run_id = fmt::format("scale{}", n);
  run.cfg.token = "rdzv-scale-bench-token";
  run.cfg.nnodes = n;
  run.cfg.scenario = sc;
  run.cfg.gpus = o.gpus >= 0 ? o.gpus : o.real_agent ? 8 : 0;
  const int first_sim = o.real_agent ? 2 : 1;  // node rank 1 is the real agent
  run.cfg.abort_rank = first_sim;
  run.stats.resize(static_cast<std::size_t>(n));
  // Barrier: the master's workers end during the idle window, so it waits at the barrier first.
  const int sleep_s = sc == Scenario::barrier ? 1 : 3600;
  const std::string log =
      fmt::format("/tmp/rdzv_scale_master_{}_{}.log", n, sc == Scenario::abort ? "abort" : "barrier");
  const pid_t master =
      spawn_ddprun(o, run.cfg, 0, {"/bin/sleep", std::to_string(sleep_s)}, log, run.cfg.port);
  if (!wait_listening(run.cfg.port, master)) {
    r.note = "master never listened; see " + log;
    reap_master(master, r);
    return r;
  }
  const std::string agent_log =
      fmt::format("/tmp/rdzv_scale_agent_{}_{}.log", n, sc == Scenario::abort ? "abort" : "barrier");
  // The real agent reaches the master through a relay that counts the bytes it receives and sends.
  std::unique_ptr<testnet::ByteProxy> relay;
  if (o.real_agent) {
    // Its workers end at once (it then waits at the exit barrier), or run until the abort.
    const std::vector<std::string> cmd = sc == Scenario::barrier
                                             ? std::vector<std::string>{"/bin/true"}
                                             : std::vector<std::string>{"/bin/sleep", "3600"};
    relay = std::make_unique<testnet::ByteProxy>(run.cfg.port);
    r.agent_pid = spawn_ddprun(o, run.cfg, 1, cmd, agent_log, relay->port());
  }
  std::vector<std::unique_ptr<asio::io_context>> ios;
  std::vector<std::unique_ptr<sim::Gate>> gates, leave;
  for (int t = 0; t < o.threads; ++t) {
    ios.push_back(std::make_unique<asio::io_context>(1));
    gates.push_back(std::make_unique<sim::Gate>(*ios.back()));
    leave.push_back(std::make_unique<sim::Gate>(*ios.back()));
  }
  std::vector<std::unique_ptr<sim::Agent>> agents;
  run.cfg.one_conn = o.one_conn;
  run.cfg.ramp_ms = o.ramp_ms;
  run.cfg.scattered_hosts = o.scattered_hosts;
  const std::int64_t t0 = sim::now_ns();
  for (int rank = first_sim; rank < n; ++rank) {
    const auto lane = static_cast<std::size_t>(rank % o.threads);
    if (o.one_conn) {
      agents.push_back(
          std::make_unique<sim::AgentOneConn>(*ios[lane], run, *gates[lane], *leave[lane], rank));
    } else {
      agents.push_back(std::make_unique<sim::AgentTwoConns>(*ios[lane], run, *gates[lane], rank));
    }
    asio::co_spawn(*ios[lane], agents.back()->run(), asio::detached);
  }
  std::vector<std::thread> threads;
  for (auto& io : ios) threads.emplace_back([&io] { io->run(); });
  const int others = n - first_sim;
  const auto limit = std::chrono::seconds(120 + n / 64);
  // Stop waiting for the plan once nothing moved for 30 s (agents failing or getting their plan).
  int last_seen = -1;
  auto moved_at = sim::Clock::now();
  bool stalled = false;
  const auto plans_or_stall = [&] {
    const int now = run.plans.load() + run.failed.load();
    if (now != last_seen) last_seen = now, moved_at = sim::Clock::now();
    stalled = sim::Clock::now() - moved_at > 30s;
    return now >= others || stalled;
  };
  bool ok = watch_master(master, r, o, limit, plans_or_stall) && !stalled;
  if (stalled) {
    r.note = fmt::format("stalled: {} of {} agents hold the plan, {} failed, no progress for 30 s; see {}",
                         run.plans.load(), others, run.failed.load(), log);
  }
  std::int64_t t_go = 0;
  if (ok && run.failed.load() == 0) {
    // Every watch is open a moment after its plan; then the job "runs" with nothing but heartbeats.
    ok = watch_master(master, r, o, 10s, [end = sim::Clock::now() + 1s] { return sim::Clock::now() > end; });
    const double c0 = proc_cpu_s(master);
    // The one-connection heartbeat interval grows with N: the window spans at least two of them.
    const double idle_s =
        o.one_conn
            ? std::max(o.idle_s, 2.0 * static_cast<double>(sim::heartbeat_interval_for(n).count()) / 1000.0)
            : o.idle_s;
    const auto idle = std::chrono::duration<double>(idle_s);
    ok = ok && watch_master(master, r, o, 60s,
                            [end = sim::Clock::now() + idle] { return sim::Clock::now() > end; });
    if (ok) r.idle_cpu = (proc_cpu_s(master) - c0) / idle_s;
    t_go = sim::now_ns();
    for (auto& g : gates) g->fire();
  } else if (ok) {
    r.note = "";  // summarize() says how many failed, and when
  }
  // The master exits by itself after an abort, once the agents have gone: not a reason to stop.
  // After an abort, the agents leave once every one has it (sim_agent.hpp, AgentOneConn).
  bool left = false;
  const auto all_finished = [&] {
    if (!left && run.aborts_seen.load() + run.failed.load() >= others) {
      for (auto& g : leave) g->fire();
      left = true;
    }
    return run.finished.load() >= others;
  };
  if (!watch_master(master, r, o, t_go > 0 ? 60s : 5s, all_finished, false) && r.note.empty()) {
    r.note = "agents did not finish in time";
  }
  if (run.finished.load() < others) ::kill(master, SIGKILL);
  reap_agent(r, t_go > 0 ? 60s : 5s);
  reap_master(master, r);
  if (relay) r.agent_rx = relay->to_client(), r.agent_tx = relay->to_server();
  for (auto& io : ios) io->stop();
  for (auto& t : threads) t.join();
  agents.clear();
  summarize(run, static_cast<std::size_t>(first_sim), t0, t_go, r);
  if (o.real_agent && sc == Scenario::barrier && r.agent_status != 0) {
    r.note +=
        fmt::format("{}real agent exited {}; see {}", r.note.empty() ? "" : "; ", r.agent_status, agent_log);
  }
  if (r.failed > 0 && r.plan_s >= 0) {
    r.note += fmt::format("{}{} agents failed after holding the plan", r.note.empty() ? "" : "; ", r.failed);
  } else if (r.failed > 0) {
    r.note += fmt::format("{}{} agents failed, {} held the plan", r.note.empty() ? "" : "; ", r.failed,
                          run.plans.load());
  }
  if (r.early_aborts > 0) {
    r.note += fmt::format("{}{} agents saw an abort before the go (see {})", r.note.empty() ? "" : "; ",
                          r.early_aborts, log);
  }
  return r;
}

std::string fmt_s(double s) {
  return s < 0 ? "-" : fmt::format("{:.3f}", s);
}

void print_row(const Options& o, const Result& r) {
  // The real agent's bytes received sit beside the simulated agents' (bytes/agent max).
  const std::string rx = o.real_agent ? fmt::format(" {} |", r.agent_rx) : "";
  const std::string agent =
      o.real_agent
          ? fmt::format(" {:.1f} | {} |", static_cast<double>(r.agent_hwm_kb) / 1024.0, r.agent_rchar)
          : "";
  fmt::print("| {} | {} | {} | {} | {} | {:.2f} | {:.1f} | {} | {} |{} {} |{} {}{} |\n", r.n,
             r.scenario == Scenario::abort ? "abort" : "barrier", fmt_s(r.plan_s), fmt_s(r.end_s),
             r.idle_cpu < 0 ? "-" : fmt::format("{:.3f}", r.idle_cpu), r.master_cpu_s,
             static_cast<double>(r.master_hwm_kb) / 1024.0, r.plan_bytes, r.bytes_max, rx, r.failed, agent,
             r.note.empty() ? "" : r.note, r.first_error.empty() ? "" : " " + r.first_error.substr(0, 120));
  std::fflush(stdout);
}

std::string json_line(const Options& opts, const Result& r) {
  auto esc = [](std::string s) {
    std::string o;
    for (char c : s) {
      if (c == '"' || c == '\\') o += '\\';
      if (static_cast<unsigned char>(c) >= 0x20) o += c;
    }
    return o;
  };
  return fmt::format(
      R"({{"store":"ddprun","protocol":"{}","n":{},{}"scenario":"{}","plan_s":{},"end_s":{},"reached":{},"early_aborts":{},"idle_cpu":{},)"
      R"("master_cpu_s":{:.3f},"master_hwm_mb":{:.1f},"plan_bytes":{},"bytes_max":{},"bytes_mean":{},"failed":{},)"
      R"("master_status":{},"note":"{}","error":"{}"}})",
      r.one_conn ? "one-conn" : "two-conn", r.n,
      opts.real_agent
          ? fmt::format(
                R"("agent_hwm_mb":{:.1f},"agent_rx":{},"agent_tx":{},"agent_rchar":{},"agent_status":{},)",
                static_cast<double>(r.agent_hwm_kb) / 1024.0, r.agent_rx, r.agent_tx, r.agent_rchar,
                r.agent_status)
          : std::string(),
      r.scenario == Scenario::abort ? "abort" : "barrier", r.plan_s, r.end_s, r.reached, r.early_aborts,
      r.idle_cpu, r.master_cpu_s, static_cast<double>(r.master_hwm_kb) / 1024.0, r.plan_bytes, r.bytes_max,
      r.bytes_mean, r.failed, r.master_status, esc(r.note), esc(r.first_error));
}

// Raises the descriptor limit: soft to hard, and hard too where we may (root).
void raise_fd_limit(rlim_t want) {
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_max < want) {
    rlimit more{want, want};
    if (::setrlimit(RLIMIT_NOFILE, &more) == 0) return;
  }
  rl.rlim_cur = rl.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &rl);
}

Options parse(int argc, char** argv) {
  Options o;
  o.ddprun = std::string(argv[0]).substr(0, std::string(argv[0]).rfind('/') + 1) + "../launcher/ddprun";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] {
      return i + 1 < argc ? std::string(argv[++i]) : throw std::runtime_error(a + " needs a value");
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a == "--ddprun")
      o.ddprun = next();
    else if (a == "--threads")
      o.threads = std::max(1, std::stoi(next()));
    else if (a == "--idle")
      o.idle_s = std::stod(next());
    else if (a == "--protocol") {
      const std::string v = next();
      if (v != "one-conn" && v != "two-conn") throw std::runtime_error("--protocol: one-conn or two-conn");
      o.one_conn = v == "one-conn";
    } else if (a == "--json")
      o.json = next();
    else if (a == "--scattered-hosts")
      o.scattered_hosts = true;
    else if (a == "--real-agent")
      o.real_agent = true;
    else if (a == "--gpus")
      o.gpus = std::max(0, std::stoi(next()));
    else if (a == "--ramp-ms")
      o.ramp_ms = std::stoi(next());
    else if (a == "--rss-cap-mb")
      o.rss_cap_mb = std::stol(next());
    else if (a == "--scenarios") {
      const std::string v = next();
      o.scenarios.clear();
      if (v.find("abort") != std::string::npos) o.scenarios.push_back(Scenario::abort);
      if (v.find("barrier") != std::string::npos) o.scenarios.push_back(Scenario::barrier);
    } else if (!a.empty() && a[0] == '-') {
      throw std::runtime_error("unknown option " + a + " (see --help)");
    } else {
      o.sizes.push_back(std::stoi(a));
    }
  }
  if (o.sizes.empty()) o.sizes = {256, 1024, 4096, 16384};
  if (o.real_agent && *std::min_element(o.sizes.begin(), o.sizes.end()) < 3)
    throw std::runtime_error(
        "--real-agent needs N of at least 3 (the master, the real agent, a simulated one)");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    o = parse(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rdzv_scale: %s\n", e.what());
    return 2;
  }
  ::signal(SIGPIPE, SIG_IGN);
  raise_fd_limit(static_cast<rlim_t>(*std::max_element(o.sizes.begin(), o.sizes.end())) * 3 + 1024);
  fmt::print(
      "| nodes | scenario | last plan s | abort/barrier s | idle master CPU/s | master CPU s | master peak "
      "RSS MB | plan bytes | bytes/agent max |{} failed |{} note |\n",
      o.real_agent ? " real agent bytes received |" : "",
      o.real_agent ? " agent peak RSS MB | agent's own reads (rchar) |" : "");
  fmt::print("|---|---|---|---|---|---|---|---|---|---|{}---|\n", o.real_agent ? "---|---|---|" : "");
  std::ofstream js;
  if (!o.json.empty()) js.open(o.json, std::ios::app);
  for (int n : o.sizes) {
    for (Scenario sc : o.scenarios) {
      const Result r = run_one(o, n, sc);
      print_row(o, r);
      if (js) js << json_line(o, r) << std::endl;
      if (r.plan_s < 0) break;  // the other scenario would fail the same way before the plan
    }
  }
  return 0;
}
