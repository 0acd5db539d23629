// The values of single options, parsed and checked (ports, endpoints, node counts, rank lists), the ports
// derived from a Slurm id, and how an option was given: config.hpp's pure helpers beside resolve().
#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "core/config.hpp"
#include "core/derived_port.hpp"
#include "core/hostlist.hpp"

namespace ddprun::core {

namespace {

// An even port of 20000-32767 for `text` (its hash as core/derived_port.hpp's).
std::uint16_t even_port(const std::string& text) {
  const std::uint64_t h = port_hash(text);
  constexpr std::uint64_t kSlots = (32767 - 20000) / 2;
  return static_cast<std::uint16_t>(20000 + 2 * (h % kSlots));
}

}  // namespace

std::string given_as(const Options& o, const std::string& option, const std::string& value) {
  const auto var = o.from_variable.find(option);
  return var == o.from_variable.end() ? fmt::format("{} {}", option, value)
                                      : fmt::format("{}={}", var->second, value);
}

std::string store_run_id(const std::string& run_id, const std::string& step_run) {
  return run_id == step_run ? step_run : fmt::format("{} (step {})", run_id, step_run);
}

DerivedPorts derive_ports(const std::string& job_id) {
  const std::uint16_t store = even_port(job_id);
  return {store, static_cast<std::uint16_t>(store + 1)};
}

std::vector<std::uint16_t> store_port_fallbacks(const std::string& job_id) {
  std::vector<std::uint16_t> out;
  const std::uint16_t first = even_port(job_id);
  for (int i = 1; out.size() < kStorePortFallbacks; ++i) {
    const std::uint16_t p = even_port(fmt::format("{}#{}", job_id, i));
    if (p != first && std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  }
  return out;
}

std::uint16_t parse_port(const std::string& opt, const std::string& v, int lowest) {
  int port = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), port);
  if (v.empty() || ec != std::errc() || ptr != v.data() + v.size() || port < lowest || port > 65535) {
    throw Error(
        fmt::format("{} '{}' is not a port number; give an integer from {} to 65535", opt, v, lowest));
  }
  return static_cast<std::uint16_t>(port);
}

std::optional<ReservedPorts> parse_reserved_ports(const std::string& var, const std::string& value) {
  const auto bad = [&](const std::string& why) {
    return Error(
        fmt::format("{}='{}' is not a Slurm port list ({}); expected ports and ranges such as 12000-12003 or "
                    "12000,12002: check srun --resv-ports and MpiParams=ports in slurm.conf",
                    var, value, why));
  };
  const auto port = [&](const std::string& text) {
    int p = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), p);
    if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || p < 1 || p > 65535) {
      throw bad(fmt::format("'{}' is not a port", text));
    }
    return static_cast<std::uint16_t>(p);
  };
  if (value.empty()) return std::nullopt;
  // Only the first two distinct ports are kept; every item is still checked.
  std::vector<std::uint16_t> ports;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = value.find(',', start);
    const std::string item =
        value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const std::size_t dash = item.find('-');
    const std::uint16_t lo = port(item.substr(0, dash));
    const std::uint16_t hi = dash == std::string::npos ? lo : port(item.substr(dash + 1));
    if (hi < lo) throw bad(fmt::format("range '{}' runs backwards", item));
    for (int p = lo; p <= hi && ports.size() < 2; ++p) {
      if (std::find(ports.begin(), ports.end(), p) == ports.end())
        ports.push_back(static_cast<std::uint16_t>(p));
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  ReservedPorts out{ports.front(), std::nullopt};
  if (ports.size() > 1) out.master = ports[1];
  return out;
}

std::pair<std::string, std::optional<std::uint16_t>> parse_endpoint(const std::string& opt,
                                                                    const std::string& v) {
  std::string host;
  std::string rest;
  if (!v.empty() && v.front() == '[') {  // [v6]:port
    auto close = v.find(']');
    if (close == std::string::npos)
      throw Error(fmt::format("{} '{}' has no closing ']'; use [ADDR]:PORT", opt, v));
    host = v.substr(1, close - 1);
    rest = v.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') throw Error(fmt::format("{} '{}' is not HOST:PORT", opt, v));
  } else {
    auto colon = v.rfind(':');
    if (colon != std::string::npos && v.find(':') != colon) {
      throw Error(fmt::format("{} '{}': write an IPv6 address as [ADDR]:PORT", opt, v));
    }
    host = v.substr(0, colon);
    if (colon != std::string::npos) rest = v.substr(colon);
  }
  if (host.empty()) throw Error(fmt::format("{} '{}' has no host; use HOST:PORT", opt, v));
  if (rest.empty()) return {host, std::nullopt};
  return {host, parse_port(opt, rest.substr(1), 0)};
}

std::pair<int, int> parse_nnodes(const std::string& v) {
  auto colon = v.find(':');
  if (colon == std::string::npos) {
    int n = parse_int("--nnodes", v, 1);
    return {n, n};
  }
  int lo = parse_int("--nnodes (MIN)", v.substr(0, colon), 1);
  int hi = parse_int("--nnodes (MAX)", v.substr(colon + 1), 1);
  if (lo > hi)
    throw Error(fmt::format("--nnodes {}: MIN {} is greater than MAX {}; write MIN:MAX", v, lo, hi));
  return {lo, hi};
}

std::set<int> parse_rank_filter(const std::string& v) {
  std::set<int> out;
  for (const auto& item : split_list(v)) {
    auto dash = item.find('-');
    if (dash == std::string::npos) {
      out.insert(parse_int("--local-ranks-filter", item, 0));
      continue;
    }
    int lo = parse_int("--local-ranks-filter", item.substr(0, dash), 0);
    int hi = parse_int("--local-ranks-filter", item.substr(dash + 1), 0);
    if (lo > hi) throw Error(fmt::format("--local-ranks-filter '{}': range {} is reversed", v, item));
    for (int i = lo; i <= hi; ++i) out.insert(i);
  }
  if (out.empty()) throw Error(fmt::format("--local-ranks-filter '{}' names no ranks; e.g. 0 or 0,2-3", v));
  return out;
}

CommandSpec command_spec(const Options& o) {
  const LocalRankArg arg = parse_local_rank_arg(o.local_rank_arg);
  // The argument would carry the real local rank while LOCAL_RANK says 0: the script would pick a GPU it
  // cannot see.
  if (o.virtual_local_rank && arg != LocalRankArg::none) {
    throw Error(
        fmt::format("--virtual-local-rank with --local-rank-arg {}: every worker's local rank is 0 "
                    "then; drop --local-rank-arg and read LOCAL_RANK",
                    o.local_rank_arg));
  }
  return CommandSpec{o.command, o.no_python, o.module, o.python, arg};
}

}  // namespace ddprun::core
