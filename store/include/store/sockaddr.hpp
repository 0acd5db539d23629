#pragma once
// Socket addresses as the store's messages print them.
#include <sys/socket.h>

#include <string>

namespace ddprun::store {

// "10.0.0.1:29400", "[fe80::1]:29400"; "unknown address" for other families or a null pointer.
// Numeric only: an error message must never wait on a resolver.
std::string sockaddr_text(const sockaddr* sa);
// The address alone, numeric ("10.0.0.1", "fe80::1"); empty for other families.
std::string numeric_host_of(const sockaddr_storage& ss);

}  // namespace ddprun::store
