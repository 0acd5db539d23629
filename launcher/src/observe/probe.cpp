#include "probe.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>

namespace ddprun::launcher {

namespace {

using Clock = std::chrono::steady_clock;

// One resolved address per host (the first getaddrinfo gives), looked up once.
class Resolver {
 public:
  const std::optional<sockaddr_storage>& operator()(const std::string& host) {
    const auto it = cache_.find(host);
    if (it != cache_.end()) return it->second;
    std::optional<sockaddr_storage> out;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) == 0 && res != nullptr) {
      sockaddr_storage ss{};
      std::memcpy(&ss, res->ai_addr, std::min<std::size_t>(res->ai_addrlen, sizeof ss));
      out = ss;
    }
    if (res != nullptr) ::freeaddrinfo(res);
    return cache_.emplace(host, out).first->second;
  }

 private:
  std::map<std::string, std::optional<sockaddr_storage>> cache_;
};

void set_port(sockaddr_storage& ss, std::uint16_t port) {
  if (ss.ss_family == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(port);
  } else {
    reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = htons(port);
  }
}

// Descriptors one batch may hold: well under the soft limit, whatever else this process has open.
std::size_t batch_size() {
  rlimit rl{};
  const rlim_t soft = ::getrlimit(RLIMIT_NOFILE, &rl) == 0 ? rl.rlim_cur : 1024;
  return static_cast<std::size_t>(std::clamp<rlim_t>(soft > 128 ? soft - 64 : 64, 64, 4096));
}

// One non-blocking connect; -1 when it failed at once (refused, unreachable).
int start_connect(sockaddr_storage ss, std::uint16_t port) {
  set_port(ss, port);
  const int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const socklen_t len = ss.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&ss), len) == 0 || errno == EINPROGRESS) return fd;
  ::close(fd);
  return -1;
}

void probe_batch(const std::vector<ProbePlace>& places, std::size_t from, std::size_t to, Resolver& resolve,
                 Clock::time_point deadline, std::vector<bool>& out) {
  std::vector<pollfd> fds;
  std::vector<std::size_t> which;
  for (std::size_t i = from; i < to; ++i) {
    const auto& addr = resolve(places[i].host);
    if (!addr) continue;
    const int fd = start_connect(*addr, places[i].port);
    if (fd < 0) continue;
    fds.push_back({fd, POLLOUT, 0});
    which.push_back(i);
  }
  std::size_t open = fds.size();
  while (open > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) break;
    const int n = ::poll(fds.data(), fds.size(), static_cast<int>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (std::size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].fd < 0 || fds[k].revents == 0) continue;
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(fds[k].fd, SOL_SOCKET, SO_ERROR, &err, &len);
      out[which[k]] = err == 0 && (fds[k].revents & POLLOUT) != 0;
      ::close(fds[k].fd);
      fds[k].fd = -1;  // poll ignores it from now on
      --open;
    }
  }
  for (const auto& p : fds) {
    if (p.fd >= 0) ::close(p.fd);
  }
}

}  // namespace

std::string resolve_error(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (res != nullptr) ::freeaddrinfo(res);
  if (rc == 0) return {};
  return rc == EAI_SYSTEM ? std::strerror(errno) : ::gai_strerror(rc);
}

std::vector<bool> accepting(const std::vector<ProbePlace>& places, std::chrono::milliseconds timeout) {
  std::vector<bool> out(places.size(), false);
  Resolver resolve;
  const std::size_t batch = batch_size();
  for (std::size_t from = 0; from < places.size(); from += batch) {
    probe_batch(places, from, std::min(places.size(), from + batch), resolve, Clock::now() + timeout, out);
  }
  return out;
}

}  // namespace ddprun::launcher
