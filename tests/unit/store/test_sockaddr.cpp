// sockaddr_text: the address format shared by the client's attempt list and the server's log.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <catch2/catch.hpp>

#include "store/sockaddr.hpp"

using ddprun::store::sockaddr_text;

TEST_CASE("IPv4 addresses print as addr:port", "[sockaddr]") {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(29400);
  REQUIRE(::inet_pton(AF_INET, "10.1.2.3", &a.sin_addr) == 1);
  CHECK(sockaddr_text(reinterpret_cast<const sockaddr*>(&a)) == "10.1.2.3:29400");
}

TEST_CASE("IPv6 addresses are bracketed so the port stays readable", "[sockaddr]") {
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_port = htons(1);
  REQUIRE(::inet_pton(AF_INET6, "fe80::1", &a.sin6_addr) == 1);
  CHECK(sockaddr_text(reinterpret_cast<const sockaddr*>(&a)) == "[fe80::1]:1");
}

TEST_CASE("Other families and no address do not crash", "[sockaddr]") {
  sockaddr_storage unix_like{};
  unix_like.ss_family = AF_UNIX;
  CHECK(sockaddr_text(reinterpret_cast<const sockaddr*>(&unix_like)) == "unknown address");
  CHECK(sockaddr_text(nullptr) == "unknown address");
}
