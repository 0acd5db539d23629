#pragma once
// Thin network I/O for finding a job's store (job_locator.cpp): whether a name resolves here, and which
// of many HOST:PORT places accept a TCP connection, all at once and bounded, so that looking for a store
// that a node-0 failover moved costs one timeout however many places there are.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ddprun::launcher {

struct ProbePlace {
  std::string host;  // a name or a numeric address
  std::uint16_t port = 0;
};

// Empty when `host` resolves here (getaddrinfo), else why not (gai_strerror).
std::string resolve_error(const std::string& host);

// For each place, whether something accepts a TCP connection there within `timeout` (which every place
// shares: non-blocking connects, polled together in batches that fit the descriptor limit). The
// connection is closed at once, before any byte is sent.
std::vector<bool> accepting(const std::vector<ProbePlace>& places, std::chrono::milliseconds timeout);

}  // namespace ddprun::launcher
