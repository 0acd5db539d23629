#pragma once
// Socket addresses as the store's messages print them and as its peer filters compare them.
#include <sys/socket.h>

#include <string>
#include <vector>

namespace ddprun::store {

// "10.0.0.1:29400", "[fe80::1]:29400"; "unknown address" for other families or a null pointer.
// Numeric only: an error message must never wait on a resolver.
std::string sockaddr_text(const sockaddr* sa);
// The address alone, numeric and in the one form every peer filter compares ("10.0.0.1", "fe80::1"; an
// IPv4-mapped IPv6 address as its IPv4 address, as a dual-stack listener sees IPv4 peers); empty for
// other families.
std::string numeric_host_of(const sockaddr_storage& ss);
// The same form for an address given as text ("[::ffff:10.0.0.1]" -> "10.0.0.1").
std::string normalize_address(const std::string& numeric);
// This host's own addresses in that form, loopback included: the peers a filtering server always admits.
std::vector<std::string> local_addresses();

}  // namespace ddprun::store
