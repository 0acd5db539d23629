#pragma once
// --rdzv-iface IFACE: which of an interface's addresses this node advertises (docs/cli.md, "The right
// network"). Pure: the launcher lists the interfaces (getifaddrs) and passes them in.
#include <string>
#include <vector>

namespace ddprun::core {

// One entry of the interface list as getifaddrs gives it: an interface with no IPv4/IPv6 address
// still appears once (family other) so that error messages can name it.
struct IfaceEntry {
  enum class Family { v4, v6, other };
  std::string name;
  Family family = Family::other;
  std::string address;  // numeric, without brackets or scope; empty for `other`
  bool up = true;       // IFF_UP
};

// An IPv6 address a peer on another node can reach without a scope id: not loopback, not link-local
// (fe80::/10), not unspecified. Unique-local (fd00::/8) counts, as the kernel's scope "global" does.
bool is_global_v6(const std::string& numeric);

// The address `iface` is reached at: its first IPv4 address, else its first global IPv6 address.
// Throws Error naming the interface, this node (`host`) and the interfaces that exist, when there is no
// such interface, it is down, or it has no usable address.
std::string choose_iface_address(const std::string& iface, const std::vector<IfaceEntry>& entries,
                                 const std::string& host);

}  // namespace ddprun::core
