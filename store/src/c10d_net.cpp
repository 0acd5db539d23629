#include "c10d_net.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/core.h>

#include "store/error.hpp"

namespace ddprun::store::c10d {

namespace {
// The kernel clamps it to net.core.somaxconn: a rank storm should find the queue as deep as allowed.
constexpr int kBacklog = 65535;
}  // namespace

int listen_on(const std::string& host, std::uint16_t port) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  const std::string where = host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port)
                                                                : fmt::format("{}:{}", host, port);
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (::inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    len = sizeof(sockaddr_in);
  } else if (::inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    len = sizeof(sockaddr_in6);
  } else {
    throw Error(Error::Kind::usage, fmt::format("worker store: '{}' is not a numeric address", host),
                "listen", where);
  }
  const int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    throw Error(Error::Kind::io, fmt::format("worker store: socket(): {}", std::strerror(errno)), "listen",
                where);
  }
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  // Accepted sockets inherit it from the listener (Linux): a syscall less per worker.
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (ss.ss_family == AF_INET6 && host == "::") {
    const int zero = 0;  // dual-stack, as torch's server: IPv4 workers reach "::" too
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(fd, kBacklog) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(err == EADDRINUSE ? Error::Kind::address_in_use : Error::Kind::io,
                fmt::format("the workers' store cannot listen on {}: {}", where, std::strerror(err)),
                "listen", where);
  }
  return fd;
}

std::uint16_t local_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return 0;
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

void close_reset(int fd) {
  const linger lg{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  ::close(fd);
}

int start_connect(const std::string& host, std::uint16_t port, bool& done, const std::string& source) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (::getaddrinfo(host.c_str(), service.c_str(), &hints, &res) != 0 || res == nullptr) {
    errno = EHOSTUNREACH;
    return -1;
  }
  int fd = -1;
  int err = ECONNREFUSED;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      err = errno;
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (!source.empty() && a->ai_family == AF_INET) {
      sockaddr_in src{};
      src.sin_family = AF_INET;
      ::setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
      // A source that cannot be used fails this address: connecting from the kernel's choice instead
      // would quietly undo what the caller asked for.
      int unusable = 0;
      if (::inet_pton(AF_INET, source.c_str(), &src.sin_addr) != 1) {
        unusable = EINVAL;
      } else if (::bind(fd, reinterpret_cast<const sockaddr*>(&src), sizeof src) != 0) {
        unusable = errno;
      }
      if (unusable != 0) {
        err = unusable;
        ::close(fd);
        fd = -1;
        continue;
      }
    }
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      done = true;
      break;
    }
    if (errno == EINPROGRESS) {
      done = false;
      break;
    }
    err = errno;
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(res);
  if (fd < 0) errno = err;
  return fd;
}

int connect_result(int fd) {
  int err = 0;
  socklen_t len = sizeof err;
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
  return err;
}

}  // namespace ddprun::store::c10d
