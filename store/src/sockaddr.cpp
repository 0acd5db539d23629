#include "store/sockaddr.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <fmt/core.h>

namespace ddprun::rdzv {

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

}  // namespace ddprun::rdzv
