#include "core/slurm_env.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/hostlist.hpp"

namespace ddprun::core {

const char* to_string(SlurmContext c) {
  return name_of(kSlurmContextNames, c, "?");
}

int parse_int(const std::string& name, const std::string& value, int min_value) {
  int out = 0;
  const char* first = value.data();
  const char* last = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(first, last, out);
  if (value.empty() || ec != std::errc() || ptr != last) {
    throw Error(fmt::format("{}='{}' is not a whole number; give an integer", name, value));
  }
  if (out < min_value) {
    throw Error(fmt::format("{}={} is out of range; it must be at least {}", name, value, min_value));
  }
  return out;
}

std::vector<std::string> split_list(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else if (c != ' ' && c != '\n' && c != '\t') {
      cur.push_back(c);
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

std::optional<std::string> slurm_conf_munge_socket(std::string_view conf) {
  const auto lower = [](std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
  };
  const auto unquote = [](std::string_view v) {
    if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front())
      v = v.substr(1, v.size() - 2);
    return v;
  };
  std::optional<std::string> socket;
  std::size_t start = 0;
  while (start < conf.size()) {
    std::size_t end = conf.find('\n', start);
    if (end == std::string_view::npos) end = conf.size();
    std::string_view line = conf.substr(start, end - start);
    start = end + 1;
    if (const auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    // KEY=VALUE pairs separated by blanks (a quoted value keeps its blanks).
    std::size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
      const std::size_t from = i;
      char quote = 0;
      while (i < line.size() && (quote || !std::isspace(static_cast<unsigned char>(line[i])))) {
        if (line[i] == '"' || line[i] == '\'') quote = quote == line[i] ? 0 : (quote ? quote : line[i]);
        ++i;
      }
      const std::string_view pair = line.substr(from, i - from);
      const auto eq = pair.find('=');
      if (eq == std::string_view::npos || lower(pair.substr(0, eq)) != "authinfo") continue;
      std::optional<std::string> here;
      std::string_view opts = unquote(pair.substr(eq + 1));
      while (!opts.empty()) {
        const auto comma = std::min(opts.find(','), opts.size());
        const std::string_view opt = opts.substr(0, comma);
        opts = opts.substr(std::min(comma + 1, opts.size()));
        const auto oeq = opt.find('=');
        if (oeq != std::string_view::npos && lower(opt.substr(0, oeq)) == "socket" && oeq + 1 < opt.size())
          here = std::string(opt.substr(oeq + 1));
      }
      socket = here;  // the last AuthInfo is the one Slurm keeps
    }
  }
  return socket;
}

namespace {

std::optional<std::string> get(const EnvSnapshot& env, const char* name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

std::optional<FromVar<std::string>> first_of(const EnvSnapshot& env,
                                             std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (auto v = get(env, n)) return FromVar<std::string>{*v, n};
  }
  return std::nullopt;
}

std::optional<FromVar<int>> first_int(const EnvSnapshot& env, std::initializer_list<const char*> names,
                                      int min_value) {
  if (auto v = first_of(env, names)) return FromVar<int>{parse_int(v->var, v->value, min_value), v->var};
  return std::nullopt;
}

std::optional<int> opt_int(const EnvSnapshot& env, const char* name, int min_value) {
  if (auto v = get(env, name)) return parse_int(name, *v, min_value);
  return std::nullopt;
}

}  // namespace

SlurmEnv read_slurm_env(const EnvSnapshot& env) {
  SlurmEnv s;
  s.job_id = get(env, "SLURM_JOB_ID");
  if (!s.job_id) s.job_id = get(env, "SLURM_JOBID");
  s.step_id = get(env, "SLURM_STEP_ID");
  if (!s.step_id) s.step_id = get(env, "SLURM_STEPID");
  // Set but empty is not unset: CUDA then shows no device, the usual way to keep a program off the GPUs.
  if (auto it = env.find("CUDA_VISIBLE_DEVICES"); it != env.end()) s.cuda_visible_devices = it->second;
  if (!s.job_id) return s;  // not under Slurm: ignore stray SLURM_* variables

  s.context = s.step_id ? SlurmContext::step : SlurmContext::batch;
  if (s.context == SlurmContext::step) {
    s.nodelist = first_of(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"});
    s.num_nodes = first_int(env, {"SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"}, 1);
    s.num_tasks = first_int(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"}, 1);
    s.tasks_per_node = first_of(env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
    s.gpus = first_of(env, {"SLURM_STEP_GPUS", "SLURM_JOB_GPUS"});
    s.node_id = opt_int(env, "SLURM_NODEID", 0);
    s.proc_id = opt_int(env, "SLURM_PROCID", 0);
    s.local_id = opt_int(env, "SLURM_LOCALID", 0);
  } else {
    // Batch shell: SLURM_NODEID/SLURM_NTASKS describe the batch step, not a parallel step.
    s.nodelist = first_of(env, {"SLURM_JOB_NODELIST", "SLURM_NODELIST"});
    s.num_nodes = first_int(env, {"SLURM_JOB_NUM_NODES", "SLURM_NNODES"}, 1);
    s.gpus = first_of(env, {"SLURM_JOB_GPUS"});
  }
  s.nodename = get(env, "SLURMD_NODENAME");
  s.cpus_per_task = opt_int(env, "SLURM_CPUS_PER_TASK", 1);
  s.cpus_on_node = opt_int(env, "SLURM_CPUS_ON_NODE", 1);
  s.het_size = get(env, "SLURM_HET_SIZE");
  if (s.het_size) {
    const int k = parse_int("SLURM_HET_SIZE", *s.het_size, 1);
    for (int i = 0; i < k; ++i) {
      const auto list = get(env, fmt::format("SLURM_JOB_NODELIST_HET_GROUP_{}", i).c_str());
      if (!list) {
        s.het_nodelists.clear();
        break;
      }
      s.het_nodelists.push_back(*list);
    }
    if (k < 2) s.het_nodelists.clear();
  }
  if (s.context == SlurmContext::batch && !s.het_nodelists.empty()) {
    // The batch shell's nodelist, node count and GPUs are component 0's: the job is every component, and
    // each node's agent counts its own GPUs after the self-launch.
    s.nodelist = FromVar<std::string>{fmt::format("{}", fmt::join(s.het_nodelists, ",")),
                                      "SLURM_JOB_NODELIST_HET_GROUP_*"};
    s.num_nodes.reset();
    s.gpus.reset();
    s.cuda_visible_devices.reset();
  }
  s.restart_count = opt_int(env, "SLURM_RESTART_COUNT", 0);
  s.resv_ports = get(env, "SLURM_STEP_RESV_PORTS");
  s.topology_addr = get(env, "SLURM_TOPOLOGY_ADDR");
  return s;
}

namespace {

// The nodelist's hosts, in the step's order: a heterogeneous step's are ordered by component.
std::vector<std::string> layout_hosts(const SlurmEnv& s) {
  try {
    auto hosts = expand_hostlist(s.nodelist->value);
    if (s.context == SlurmContext::step && !s.het_nodelists.empty()) {
      std::vector<std::vector<std::string>> components;
      for (const auto& c : s.het_nodelists) components.push_back(expand_hostlist(c));
      if (auto order = het_node_order(hosts, components)) hosts = std::move(*order);
    }
    return hosts;
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", s.nodelist->var, e.what()));
  }
}

// The tasks per node and in all, each checked against the node count and the other variables.
void count_tasks(const SlurmEnv& s, int nhosts, SlurmLayout& out) {
  if (s.tasks_per_node) {
    try {
      out.tasks_per_node = parse_count_list(s.tasks_per_node->value);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {}", s.tasks_per_node->var, e.what()));
    }
    if (static_cast<int>(out.tasks_per_node.size()) != nhosts) {
      throw Error(fmt::format("{}='{}' gives counts for {} nodes but {} names {}", s.tasks_per_node->var,
                              s.tasks_per_node->value, out.tasks_per_node.size(), s.nodelist->var, nhosts));
    }
    int sum = 0;
    for (int t : out.tasks_per_node) sum += t;
    if (s.num_tasks && s.num_tasks->value != sum) {
      throw Error(fmt::format("{}={} disagrees with {}='{}', which adds up to {}", s.num_tasks->var,
                              s.num_tasks->value, s.tasks_per_node->var, s.tasks_per_node->value, sum));
    }
    out.num_tasks = sum;
  } else if (s.num_tasks) {
    out.num_tasks = s.num_tasks->value;
  }
}

}  // namespace

SlurmLayout slurm_layout(const SlurmEnv& s) {
  SlurmLayout out;
  if (!s.nodelist && s.het_size) {
    // A heterogeneous job's shell names its nodes per component (SLURM_JOB_NODELIST_HET_GROUP_N).
    throw Error(
        fmt::format("this is a heterogeneous job ({} components, SLURM_HET_SIZE={}): ddprun runs on one "
                    "component at a time; start it with srun --het-group=N ddprun ...",
                    *s.het_size, *s.het_size));
  }
  if (!s.nodelist) {
    throw Error(
        "SLURM_JOB_ID is set but no nodelist (SLURM_STEP_NODELIST/SLURM_JOB_NODELIST) is; "
        "run ddprun inside a Slurm job or unset SLURM_JOB_ID");
  }
  out.hosts = layout_hosts(s);
  if (out.hosts.empty())
    throw Error(fmt::format("{}='{}' names no hosts", s.nodelist->var, s.nodelist->value));
  const int nhosts = static_cast<int>(out.hosts.size());
  if (s.num_nodes && s.num_nodes->value != nhosts) {
    throw Error(fmt::format("{}={} disagrees with {}='{}', which names {} hosts", s.num_nodes->var,
                            s.num_nodes->value, s.nodelist->var, s.nodelist->value, nhosts));
  }
  count_tasks(s, nhosts, out);
  if (s.context == SlurmContext::step && s.node_id && *s.node_id >= nhosts) {
    throw Error(fmt::format("SLURM_NODEID={} is outside the step's {} nodes ({}='{}')", *s.node_id, nhosts,
                            s.nodelist->var, s.nodelist->value));
  }
  if (s.context == SlurmContext::step && s.node_id && s.local_id && !out.tasks_per_node.empty() &&
      *s.local_id >= out.tasks_per_node[static_cast<std::size_t>(*s.node_id)]) {
    throw Error(fmt::format("SLURM_LOCALID={} is outside the {} tasks of node {} ({}='{}')", *s.local_id,
                            out.tasks_per_node[static_cast<std::size_t>(*s.node_id)], *s.node_id,
                            s.tasks_per_node->var, s.tasks_per_node->value));
  }
  return out;
}

std::optional<std::vector<std::string>> het_node_order(
    const std::vector<std::string>& step_hosts, const std::vector<std::vector<std::string>>& components) {
  const std::set<std::string> in_step(step_hosts.begin(), step_hosts.end());
  std::vector<std::string> order;
  int spanned = 0;
  for (const auto& c : components) {
    bool any = false;
    for (const auto& h : c) {
      if (in_step.contains(h)) {
        order.push_back(h);
        any = true;
      }
    }
    spanned += any ? 1 : 0;
  }
  if (spanned < 2 || order.size() != step_hosts.size() ||
      std::set<std::string>(order.begin(), order.end()).size() != order.size())
    return std::nullopt;
  return order;
}

std::vector<std::string> visible_gpus(const SlurmEnv& s, const std::vector<std::string>& probed) {
  if (s.cuda_visible_devices) {
    // Slurm writes NoDevFiles when a job asked for GPUs on a node without device files.
    if (*s.cuda_visible_devices == "NoDevFiles") return {};
    return split_list(*s.cuda_visible_devices);
  }
  if (s.gpus) return split_list(s.gpus->value);
  return probed;
}

}  // namespace ddprun::core
