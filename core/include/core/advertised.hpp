#pragma once
// The addresses the nodes advertise (--rdzv-iface, --local-addr), checked together: where nodes with
// different host names advertise one address, or a loopback one, the other nodes and the workers would
// reach the wrong machine (their own, for a loopback address). Pure: node 0 checks each round's nodes,
// a dry run its own address against the plan's hosts.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::core {

// 127.0.0.0/8, ::1 (also written out in full), ::ffff:127.x.x.x, and the name localhost.
bool is_loopback_address(std::string_view addr);

struct AdvertisedNode {
  std::string host;  // its host name; "" when unknown
  std::string addr;  // the address it advertises; "" when unknown
};

// One line naming the nodes and `option` (what chose the addresses: "--rdzv-iface lo",
// "DDPRUN_RDZV_IFACE=lo") when nodes of different host names advertise one address, or a node advertises a
// loopback address while the job has nodes of other host names; nullopt otherwise (several nodes of one
// host name on one address: loopback tests, several agents on one machine).
std::optional<std::string> advertised_address_warning(const std::vector<AdvertisedNode>& nodes,
                                                      const std::string& option);

}  // namespace ddprun::core
