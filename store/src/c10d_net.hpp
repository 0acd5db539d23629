#pragma once
// Socket plumbing of the workers' store (server, relay): numeric addresses only, no resolver on
// the loop's thread.
#include <sys/socket.h>

#include <cstdint>
#include <string>

namespace ddprun::store::c10d {

// A non-blocking, close-on-exec listener on a numeric host ("0.0.0.0", "::", "10.1.2.3") and
// port, with SO_REUSEADDR (as torch's store) and the largest backlog the kernel allows. Throws
// store::Error naming the address and the OS error.
int listen_on(const std::string& host, std::uint16_t port);
std::uint16_t local_port(int fd);
// Closes with a reset (SO_LINGER 0): nothing is owed to the peer, and no TIME_WAIT stays behind.
void close_reset(int fd);
// A non-blocking connect to a host name or address (from `source`, a numeric IPv4 address, when given: one
// that cannot be bound fails the connect); -1 with errno on failure. `done` is false while the connection is
// in progress (wait for EPOLLOUT, then connect_result()).
int start_connect(const std::string& host, std::uint16_t port, bool& done, const std::string& source = "");
int connect_result(int fd);  // 0 or the errno of a finished non-blocking connect

}  // namespace ddprun::store::c10d
