#include "core/advertised.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace ddprun::core {

namespace {

constexpr std::size_t kNamedHosts = 4;  // a line names this many hosts, then counts the rest

// "node1, node2, node3, node4 and 12 more"
std::string some_hosts(const std::vector<std::string>& hosts) {
  if (hosts.size() <= kNamedHosts) return fmt::format("{}", fmt::join(hosts, ", "));
  const std::vector<std::string> first(hosts.begin(), hosts.begin() + kNamedHosts);
  return fmt::format("{} and {} more", fmt::join(first, ", "), hosts.size() - kNamedHosts);
}

// A dotted quad's first number, when `a` is one.
std::optional<int> first_octet(std::string_view a) {
  int dots = 0;
  for (const char c : a) {
    if (c == '.') {
      ++dots;
    } else if (!std::isdigit(static_cast<unsigned char>(c))) {
      return std::nullopt;
    }
  }
  const auto dot = a.find('.');
  if (dots != 3 || dot == 0 || dot > 3) return std::nullopt;
  return std::stoi(std::string(a.substr(0, dot)));
}

// The hosts of `nodes` with `want` true, each once, in node order.
template <typename Pred>
std::vector<std::string> hosts_where(const std::vector<AdvertisedNode>& nodes, Pred want) {
  std::vector<std::string> out;
  for (const auto& n : nodes) {
    if (!n.host.empty() && want(n) && std::find(out.begin(), out.end(), n.host) == out.end())
      out.push_back(n.host);
  }
  return out;
}

}  // namespace

bool is_loopback_address(std::string_view addr) {
  std::string a(addr);
  std::transform(a.begin(), a.end(), a.begin(), [](unsigned char c) { return std::tolower(c); });
  if (a == "localhost" || a == "::1" || a == "0:0:0:0:0:0:0:1") return true;
  if (a.starts_with("::ffff:")) a.erase(0, 7);
  return first_octet(a) == 127;
}

std::optional<std::string> advertised_address_warning(const std::vector<AdvertisedNode>& nodes,
                                                      const std::string& option) {
  const auto all = hosts_where(nodes, [](const AdvertisedNode&) { return true; });
  if (all.size() < 2) return std::nullopt;
  const auto looped = hosts_where(nodes, [](const AdvertisedNode& n) { return is_loopback_address(n.addr); });
  if (!looped.empty()) {
    const auto addrs = [&] {
      std::set<std::string> a;
      for (const auto& n : nodes)
        if (is_loopback_address(n.addr)) a.insert(n.addr);
      return fmt::format("{}", fmt::join(a, ", "));
    }();
    return fmt::format(
        "{} advertise{} {}, a loopback address ({}), in a job of {} host names: the other nodes and the "
        "workers "
        "there would reach their own machine; choose the interface of the network between the nodes (e.g. "
        "--rdzv-iface ib0)",
        some_hosts(looped), looped.size() == 1 ? "s" : "", addrs, option, all.size());
  }
  std::map<std::string, std::vector<std::string>> by_addr;  // address -> its hosts, each once
  for (const auto& n : nodes) {
    if (n.addr.empty() || n.host.empty()) continue;
    auto& hosts = by_addr[n.addr];
    if (std::find(hosts.begin(), hosts.end(), n.host) == hosts.end()) hosts.push_back(n.host);
  }
  for (const auto& [addr, hosts] : by_addr) {
    if (hosts.size() < 2) continue;
    return fmt::format(
        "{} all advertise {} ({}): the other nodes and the workers would reach one machine for all of them; "
        "give each node its own address (--rdzv-iface IFACE, which each node looks up on itself)",
        some_hosts(hosts), addr, option);
  }
  return std::nullopt;
}

}  // namespace ddprun::core
