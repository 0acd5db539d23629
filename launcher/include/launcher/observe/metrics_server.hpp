#pragma once
// --metrics-port (docs/observe.md): a small HTTP server on a thread of its own that answers
// GET /metrics with the job's status records in Prometheus' text format. Bounded in every way: at
// most kMaxConnections clients at once (more wait in the listen queue), a request head of at most
// kMaxHead bytes read within kClientTimeout, one response, then the connection is closed. It never
// touches the supervisor: it reads the records through `source`, which must not wait.
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/status.hpp"

namespace ddprun::launcher {

inline constexpr int kMaxConnections = 16;
inline constexpr std::size_t kMaxHead = 8192;
inline constexpr std::chrono::milliseconds kClientTimeout{5000};

class MetricsServer {
 public:
  using Source = std::function<std::vector<core::NodeStatus>()>;
  // Binds HOST:PORT (host "" = every address) at once; throws core::Error (exit 2) with one line
  // when it cannot (the port taken, no permission).
  MetricsServer(const std::string& host, std::uint16_t port, Source source);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  std::uint16_t port() const { return port_; }

 private:
  void run();
  std::string answer(const std::string& head);

  Source source_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // the destructor writes to stop the thread
  std::uint16_t port_ = 0;
  std::thread thread_;
};

}  // namespace ddprun::launcher
