// The compact published plan (docs/protocol.md, "The plan"). Line oriented, with only characters
// that JSON carries unescaped in the common case, since the rendezvous wraps it in a JSON record:
//
//   ddprun-plan 2
//   mode agent            (one line per constant; omp_num_threads, cpus_per_task, worker_store and
//   ...                    virtual_local_rank only when set: worker_store when not agent)
//   gpuset 8 0 1 2 3 4 5 6 7      (the distinct GPU lists: count, then the ids; referred to by index)
//   nodes 4
//   login1 10.0.0.9 8 0 a         (one row: host, addr, local world size, gpuset index, a(ctive)|s(pare))
//   node[001-003] * 8 0 a         (a run of rows alike, each its own address: a Slurm hostlist)
//
// Strings are percent-encoded outside [A-Za-z0-9._:/@+[]-]; a host "~" is unknown, an addr "=" is
// the host. First ranks are not sent: they are the running sum over the active rows. Runs make the
// table of a uniform cluster a few lines at any size (host names fold as Slurm folds them).
#include <charconv>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>

#include "core/hostlist.hpp"
#include "core/plan_table.hpp"

namespace ddprun::core {

namespace {

constexpr int kMaxLocalWorldSize = 65536;
constexpr std::size_t kMaxNodes = 1 << 20;

bool safe_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("._:/@+[]-").find(c) != std::string_view::npos;
}

std::string pct(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (safe_char(c)) {
      out += c;
    } else {
      out += fmt::format("%{:02X}", static_cast<unsigned char>(c));
    }
  }
  return out;
}

[[noreturn]] void bad(std::size_t line, const std::string& what) {
  throw Error(fmt::format("malformed plan: line {}: {}", line, what), 1);
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A field for an error message: encoded, and cut short.
std::string shown(std::string_view s) {
  return pct(s.substr(0, 40)) + (s.size() > 40 ? "..." : "");
}

std::string unpct(std::string_view s, std::size_t line) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (safe_char(s[i])) {
      out += s[i];
      continue;
    }
    const bool escape =
        s[i] == '%' && i + 2 < s.size() && hex_digit(s[i + 1]) >= 0 && hex_digit(s[i + 2]) >= 0;
    if (!escape) bad(line, fmt::format("bad character or escape in '{}'", shown(s)));
    out += static_cast<char>(hex_digit(s[i + 1]) * 16 + hex_digit(s[i + 2]));
    i += 2;
  }
  return out;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (;;) {
    const auto cut = s.find(sep);
    out.push_back(s.substr(0, cut));
    if (cut == std::string_view::npos) return out;
    s.remove_prefix(cut + 1);
  }
}

long long number(std::string_view s, std::size_t line, long long lo, long long hi) {
  long long v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size() || v < lo || v > hi) {
    bad(line, fmt::format("'{}' is not a number from {} to {}", shown(s), lo, hi));
  }
  return v;
}

const char* const kModes[] = {"agent", "per-task", "standalone"};

void encode_constants(const JobConstants& c, std::string& out) {
  out +=
      fmt::format("mode {}\nnnodes {}\nworld_size {}\nmaster_addr {}\nmaster_port {}\nrun_id {}\nrole {}\n",
                  to_string(c.mode), c.nnodes, c.world_size, pct(c.master_addr), c.master_port, pct(c.run_id),
                  pct(c.role));
  out += fmt::format("gpus_per_proc {}\nprocs_per_replica {}\nrestart_count {}\nrequeue_count {}\n",
                     c.gpus_per_proc, c.procs_per_replica, c.restart_count, c.requeue_count);
  out += fmt::format("max_restarts {}\nnccl_async_set {}\n", c.max_restarts, c.user_set_nccl_async ? 1 : 0);
  if (c.user_omp_num_threads) out += fmt::format("omp_num_threads {}\n", pct(*c.user_omp_num_threads));
  if (c.cpus_per_task) out += fmt::format("cpus_per_task {}\n", *c.cpus_per_task);
  if (c.worker_store != WorkerStore::agent)
    out += fmt::format("worker_store {}\n", to_string(c.worker_store));
  if (c.virtual_local_rank) out += "virtual_local_rank 1\n";
}

}  // namespace

namespace {

// Rows a run line can hold: a known host that is its own address, and alike otherwise.
bool runs_with(const NodeRow& a, const NodeRow& b) {
  return b.host && b.addr == *b.host && a.local_world_size == b.local_world_size && a.gpus == b.gpus &&
         a.standby == b.standby;
}

void encode_row(const NodeRow& row, std::size_t set, std::string& out) {
  out += row.host ? pct(*row.host) : "~";
  out += ' ';
  out += row.host && row.addr == *row.host ? std::string("=") : pct(row.addr);
  out += fmt::format(" {} {} {}\n", row.local_world_size, set, row.standby ? 's' : 'a');
}

// Slurm's folding of hosts, cut at its top-level commas: "n[1-3,5],login" -> {"n[1-3,5]", "login"}.
std::vector<std::string> folded_items(const std::vector<std::string>& hosts) {
  const std::string expr = compress_hostlist(hosts);
  std::vector<std::string> items(1);
  int depth = 0;
  for (char c : expr) {
    depth += c == '[' ? 1 : c == ']' ? -1 : 0;
    if (c == ',' && depth == 0) {
      items.emplace_back();
    } else {
      items.back() += c;
    }
  }
  return items;
}

}  // namespace

std::string encode_plan_table(const PlanTable& t) {
  std::string out = "ddprun-plan 2\n";
  encode_constants(t.job, out);
  std::map<std::vector<std::string>, std::size_t> sets;
  for (const auto& row : t.nodes) {
    if (!sets.emplace(row.gpus, sets.size()).second) continue;
    out += fmt::format("gpuset {}", row.gpus.size());
    for (const auto& g : row.gpus) out += ' ' + pct(g);
    out += '\n';
  }
  out += fmt::format("nodes {}\n", t.nodes.size());
  for (std::size_t i = 0; i < t.nodes.size();) {
    const NodeRow& first = t.nodes[i];
    const std::size_t set = sets.at(first.gpus);
    std::size_t end = i + 1;
    while (end < t.nodes.size() && runs_with(first, t.nodes[end])) ++end;
    std::vector<std::string> items;
    if (end - i > 1 && runs_with(first, first)) {
      std::vector<std::string> hosts;
      for (std::size_t k = i; k < end; ++k) hosts.push_back(*t.nodes[k].host);
      try {
        items = folded_items(hosts);
      } catch (const Error&) {  // a name no hostlist holds: one line each
      }
    }
    if (items.empty()) {
      encode_row(first, set, out);
      ++i;
      continue;
    }
    for (const auto& item : items) {
      const std::size_t n = expand_hostlist(item).size();
      if (n == 1) {
        encode_row(t.nodes[i], set, out);
      } else {
        out +=
            fmt::format("{} * {} {} {}\n", pct(item), first.local_world_size, set, first.standby ? 's' : 'a');
      }
      i += n;
    }
  }
  return out;
}

namespace {

// The decoder's state: the constants and GPU sets read so far.
struct Reader {
  std::vector<std::string_view> lines;
  JobConstants c;
  std::vector<GpuList> gpusets;  // every row of a set shares its list
  std::map<std::string, bool, std::less<>> seen;

  void constant(std::string_view key, std::string_view v, std::size_t n) {
    if (!seen.emplace(std::string(key), true).second) bad(n, fmt::format("'{}' appears twice", shown(key)));
    constexpr long long kInt = std::numeric_limits<int>::max();
    if (key == "mode") {
      const std::string m = unpct(v, n);
      if (m == kModes[0])
        c.mode = Mode::agent;
      else if (m == kModes[1])
        c.mode = Mode::per_task;
      else if (m == kModes[2])
        c.mode = Mode::standalone;
      else
        bad(n, fmt::format("unknown mode '{}'", pct(m)));
    } else if (key == "nnodes") {
      c.nnodes = static_cast<int>(number(v, n, 1, kMaxNodes));
    } else if (key == "world_size") {
      c.world_size = static_cast<int>(number(v, n, 1, kInt));
    } else if (key == "master_addr") {
      c.master_addr = unpct(v, n);
    } else if (key == "master_port") {
      c.master_port = static_cast<int>(number(v, n, 0, 65535));
    } else if (key == "run_id") {
      c.run_id = unpct(v, n);
    } else if (key == "role") {
      c.role = unpct(v, n);
    } else if (key == "gpus_per_proc") {
      c.gpus_per_proc = static_cast<int>(number(v, n, 0, kMaxLocalWorldSize));
    } else if (key == "procs_per_replica") {
      c.procs_per_replica = static_cast<int>(number(v, n, 1, kMaxLocalWorldSize));
    } else {
      counter(key, v, n);
    }
  }

  void counter(std::string_view key, std::string_view v, std::size_t n) {
    constexpr long long kInt = std::numeric_limits<int>::max();
    if (key == "restart_count") {
      c.restart_count = static_cast<int>(number(v, n, 0, kInt));
    } else if (key == "requeue_count") {
      c.requeue_count = static_cast<int>(number(v, n, 0, kInt));
    } else if (key == "max_restarts") {
      c.max_restarts = static_cast<int>(number(v, n, 0, kInt));
    } else if (key == "nccl_async_set") {
      c.user_set_nccl_async = number(v, n, 0, 1) == 1;
    } else if (key == "omp_num_threads") {
      c.user_omp_num_threads = unpct(v, n);
    } else if (key == "cpus_per_task") {
      c.cpus_per_task = static_cast<int>(number(v, n, 0, kInt));
    } else if (key == "worker_store") {
      const auto ws = parse_worker_store(unpct(v, n));
      if (!ws) bad(n, fmt::format("unknown worker_store '{}'", shown(v)));
      c.worker_store = *ws;
    } else if (key == "virtual_local_rank") {
      c.virtual_local_rank = number(v, n, 0, 1) == 1;
    } else {
      bad(n, fmt::format("unknown field '{}'", shown(key)));
    }
  }

  void gpuset(std::string_view v, std::size_t n) {
    const auto parts = split(v, ' ');
    const auto count = static_cast<std::size_t>(number(parts[0], n, 0, kMaxLocalWorldSize));
    if (parts.size() != count + 1)
      bad(n, fmt::format("gpuset says {} ids but has {}", count, parts.size() - 1));
    std::vector<std::string> ids;
    for (std::size_t i = 1; i < parts.size(); ++i) ids.push_back(unpct(parts[i], n));
    gpusets.push_back(std::move(ids));
  }

  // One line of the node section: one row, or a run of rows (addr "*": HOST is a hostlist).
  void rows(std::string_view line, std::size_t n, std::size_t count, std::vector<NodeRow>& out) const {
    const auto f = split(line, ' ');
    if (f.size() != 5) bad(n, "a node row has 5 fields: host addr workers gpuset a|s");
    NodeRow r;
    r.local_world_size = static_cast<int>(number(f[2], n, 1, kMaxLocalWorldSize));
    const auto set = static_cast<std::size_t>(number(f[3], n, 0, kMaxNodes));
    if (set >= gpusets.size()) bad(n, fmt::format("gpuset {} is not defined", set));
    r.gpus = gpusets[set];
    if (f[4] != "a" && f[4] != "s") bad(n, "the last field is a (active) or s (standby)");
    r.standby = f[4] == "s";
    if (f[1] != "*") {
      if (f[0] != "~") r.host = unpct(f[0], n);
      r.addr = f[1] == "=" && r.host ? *r.host : unpct(f[1], n);
      if (out.size() == count) bad(n, fmt::format("more rows than 'nodes {}'", count));
      out.push_back(std::move(r));
      return;
    }
    std::vector<std::string> hosts;
    try {
      hosts = expand_hostlist(unpct(f[0], n));
    } catch (const Error& e) {
      bad(n, e.what());
    }
    if (hosts.size() > count - out.size()) bad(n, fmt::format("more rows than 'nodes {}'", count));
    for (auto& h : hosts) {
      r.addr = h;
      r.host = std::move(h);
      out.push_back(r);
    }
  }
};

// The checks make_plan_table makes, on a table from the wire: whatever passes derives without error.
// Errors name the node rank and the 'nodes' line (a run line holds many rows).
void check_table(PlanTable& t, std::size_t line) {
  const JobConstants& c = t.job;
  long long rank = 0;
  int active = 0;
  for (std::size_t i = 0; i < t.nodes.size(); ++i) {
    NodeRow& r = t.nodes[i];
    if (r.standby != (static_cast<int>(i) >= c.nnodes))
      bad(line, fmt::format("node rank {}: standby rows must follow the nnodes active ones", i));
    if (r.local_world_size % c.procs_per_replica != 0)
      bad(line, fmt::format("node rank {}: local world size not divisible by procs_per_replica", i));
    const auto g = static_cast<std::size_t>(c.gpus_per_proc);
    const bool task_slice = c.mode == Mode::per_task && r.gpus.size() == g;
    if (g > 0 && !task_slice &&
        (r.gpus.size() < g * static_cast<std::size_t>(r.local_world_size) || r.gpus.size() % g != 0))
      bad(line, fmt::format("node rank {}: the GPUs cannot be cut into gpus_per_proc slices", i));
    if (g == 0 && c.virtual_local_rank && r.gpus.size() > 1 &&
        r.gpus.size() < static_cast<std::size_t>(r.local_world_size))
      bad(line, fmt::format("node rank {}: too few GPUs for one each with virtual_local_rank", i));
    r.first_rank = r.standby ? -1 : static_cast<int>(rank);
    if (!r.standby) {
      rank += r.local_world_size;
      ++active;
    }
    if (rank > std::numeric_limits<int>::max()) bad(line, "the world size overflows");
  }
  if (active != c.nnodes) bad(line, fmt::format("{} active rows for nnodes {}", active, c.nnodes));
  if (rank != c.world_size)
    bad(line, fmt::format("the rows hold {} workers, world_size says {}", rank, c.world_size));
}

}  // namespace

PlanTable decode_plan_table(std::string_view bytes) {
  if (!bytes.empty() && bytes.back() == '\n') bytes.remove_suffix(1);
  Reader rd;
  rd.lines = split(bytes, '\n');
  if (rd.lines[0] != "ddprun-plan 2") bad(1, "not a ddprun plan of version 2 (mixed ddprun versions?)");
  std::size_t i = 1;
  for (; i < rd.lines.size(); ++i) {
    const auto line = rd.lines[i];
    const auto sp = line.find(' ');
    if (sp == std::string_view::npos) bad(i + 1, "expected 'key value'");
    const auto key = line.substr(0, sp);
    const auto v = line.substr(sp + 1);
    if (key == "nodes") break;
    if (key == "gpuset") {
      rd.gpuset(v, i + 1);
    } else {
      rd.constant(key, v, i + 1);
    }
  }
  if (i == rd.lines.size()) bad(i, "no 'nodes' line");
  for (const char* required : {"mode", "nnodes", "world_size", "master_addr", "master_port", "run_id"}) {
    if (!rd.seen.contains(std::string_view(required))) bad(i + 1, fmt::format("no '{}' line", required));
  }
  const auto count = static_cast<std::size_t>(number(rd.lines[i].substr(6), i + 1, 1, kMaxNodes));
  PlanTable t;
  t.job = rd.c;
  t.nodes.reserve(count);
  for (std::size_t k = i + 1; k < rd.lines.size(); ++k) rd.rows(rd.lines[k], k + 1, count, t.nodes);
  if (t.nodes.size() != count)
    bad(i + 1, fmt::format("'nodes {}' but {} rows follow", count, t.nodes.size()));
  check_table(t, i + 1);
  return t;
}

}  // namespace ddprun::core
