#include "store/sockaddr.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <cstring>

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
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a)) {
      ::inet_ntop(AF_INET, &a.s6_addr[12], host, sizeof host);
    } else {
      ::inet_ntop(AF_INET6, &a, host, sizeof host);
    }
  } else if (ss.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, host, sizeof host);
  }
  return host;
}

std::string normalize_address(const std::string& numeric) {
  std::string a = numeric;
  if (a.size() > 2 && a.front() == '[' && a.back() == ']') a = a.substr(1, a.size() - 2);
  if (a.rfind("::ffff:", 0) == 0 && a.find('.') != std::string::npos) a = a.substr(7);
  return a;
}

std::vector<std::string> local_addresses() {
  std::vector<std::string> out{"127.0.0.1", "::1"};
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    const int fam = i->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    sockaddr_storage ss{};
    std::memcpy(&ss, i->ifa_addr, fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    out.push_back(numeric_host_of(ss));
  }
  ::freeifaddrs(list);
  return out;
}

}  // namespace ddprun::store
