#include "store/sockaddr.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <fmt/core.h>

namespace ddprun::store {

std::string sockaddr_text(const sockaddr* sa) {
  char host[INET6_ADDRSTRLEN] = {};
  if (sa != nullptr && sa->sa_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(sa);
    if (::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host) == nullptr) return "unknown address";
    return fmt::format("[{}]:{}", host, ntohs(a->sin6_port));
  }
  if (sa != nullptr && sa->sa_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(sa);
    if (::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host) == nullptr) return "unknown address";
    return fmt::format("{}:{}", host, ntohs(a->sin_port));
  }
  return "unknown address";
}

std::string numeric_host_of(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr, host, sizeof host);
  } else if (ss.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, host, sizeof host);
  }
  return host;
}

}  // namespace ddprun::store
