#include "core/iface.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"

namespace ddprun::core {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// An address a peer on another node can reach: IPv4, or IPv6 without a scope.
bool usable(const IfaceEntry& e) {
  return (e.family == IfaceEntry::Family::v4 && !e.address.empty()) ||
         (e.family == IfaceEntry::Family::v6 && is_global_v6(e.address));
}

// The interfaces --rdzv-iface would accept (up, with a usable address), in order of first appearance,
// each once, without `except`: a suggestion that would fail the same way helps nobody.
std::string others(const std::vector<IfaceEntry>& entries, const std::string& except) {
  std::vector<std::string> names;
  for (const auto& e : entries) {
    if (e.name == except || !e.up || !usable(e)) continue;
    if (std::find(names.begin(), names.end(), e.name) == names.end()) names.push_back(e.name);
  }
  return names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", "));
}

}  // namespace

bool is_global_v6(const std::string& numeric) {
  const std::string a = lower(numeric);
  if (a.empty() || a == "::" || a == "::1") return false;
  // fe80::/10: a first group of four digits, fe80 to febf.
  const std::size_t group = a.find(':');
  return !(group == 4 && a.compare(0, 2, "fe") == 0 && a[2] >= '8' && a[2] <= 'b');
}

std::string choose_iface_address(const std::string& iface, const std::vector<IfaceEntry>& entries,
                                 const std::string& host) {
  std::vector<const IfaceEntry*> mine;
  for (const auto& e : entries) {
    if (e.name == iface) mine.push_back(&e);
  }
  if (mine.empty()) {
    throw Error(fmt::format(
        "--rdzv-iface {}: node {} has no interface {}; its interfaces that are up with an address: {}; "
        "name one of them (ip -brief address) or drop --rdzv-iface",
        iface, host, iface, others(entries, iface)));
  }
  if (std::none_of(mine.begin(), mine.end(), [](const IfaceEntry* e) { return e->up; })) {
    throw Error(
        fmt::format("--rdzv-iface {}: interface {} is down on node {}; bring it up, or name another of its "
                    "interfaces: {}",
                    iface, iface, host, others(entries, iface)));
  }
  for (const auto* e : mine) {
    if (e->family == IfaceEntry::Family::v4 && !e->address.empty()) return e->address;
  }
  for (const auto* e : mine) {
    if (e->family == IfaceEntry::Family::v6 && is_global_v6(e->address)) return e->address;
  }
  std::vector<std::string> skipped;
  for (const auto* e : mine) {
    if (e->family == IfaceEntry::Family::v6) skipped.push_back(e->address);
  }
  const std::string has =
      skipped.empty() ? std::string("no address")
                      : fmt::format("only link-local or loopback addresses ({})", fmt::join(skipped, ", "));
  throw Error(fmt::format(
      "--rdzv-iface {}: interface {} on node {} has no IPv4 or global IPv6 address ({}); give it one, "
      "or name another of its interfaces: {}",
      iface, iface, host, has, others(entries, iface)));
}

}  // namespace ddprun::core
