// sockaddr_text: the address format shared by the client's attempt list and the server's log.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <catch2/catch.hpp>

#include "store/sockaddr.hpp"

using ddprun::store::normalize_address;
using ddprun::store::numeric_host_of;
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

TEST_CASE("numeric_host_of gives the one form peer filters compare: IPv4-mapped as IPv4", "[sockaddr]") {
  sockaddr_storage ss{};
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  v6->sin6_family = AF_INET6;
  REQUIRE(::inet_pton(AF_INET6, "::ffff:10.1.2.3", &v6->sin6_addr) == 1);
  CHECK(numeric_host_of(ss) == "10.1.2.3");  // a dual-stack listener's IPv4 peer
  REQUIRE(::inet_pton(AF_INET6, "fe80::1", &v6->sin6_addr) == 1);
  CHECK(numeric_host_of(ss) == "fe80::1");
  sockaddr_storage s4{};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&s4);
  v4->sin_family = AF_INET;
  REQUIRE(::inet_pton(AF_INET, "10.1.2.3", &v4->sin_addr) == 1);
  CHECK(numeric_host_of(s4) == "10.1.2.3");
  // The same form for addresses given as text.
  CHECK(normalize_address("[::ffff:10.1.2.3]") == "10.1.2.3");
  CHECK(normalize_address("::ffff:10.1.2.3") == "10.1.2.3");
  CHECK(normalize_address("[fe80::1]") == "fe80::1");
  CHECK(normalize_address("10.1.2.3") == "10.1.2.3");
}
