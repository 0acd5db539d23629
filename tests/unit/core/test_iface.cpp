// --rdzv-iface (core/iface.hpp): which address of an interface a node advertises, and the one-line
// errors for a missing, down or address-less interface; tables of (name, family, address) entries as
// getifaddrs lists them.
#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "core/iface.hpp"

using namespace ddprun::core;
using F = IfaceEntry::Family;

namespace {

// lo, a management Ethernet and a fabric with both families; an IPv6-only fabric; a link-local-only one;
// one without any address; one that is down.
std::vector<IfaceEntry> node_interfaces() {
  return {
      {"lo", F::other, "", true},           {"lo", F::v4, "127.0.0.1", true},
      {"lo", F::v6, "::1", true},           {"eth0", F::other, "", true},
      {"eth0", F::v4, "10.10.0.5", true},   {"ib0", F::other, "", true},
      {"ib0", F::v6, "fe80::1", true},      {"ib0", F::v6, "2001:db8::5", true},
      {"ib0", F::v4, "10.20.0.5", true},    {"ib0", F::v4, "10.20.1.5", true},
      {"fab6", F::v6, "fe80::2", true},     {"fab6", F::v6, "fd00:20::5", true},
      {"ll0", F::v6, "fe80::3", true},      {"ll0", F::v6, "FEBF::9", true},
      {"bare0", F::other, "", true},        {"down0", F::other, "", false},
      {"down0", F::v4, "10.30.0.5", false},
  };
}

}  // namespace

TEST_CASE("rdzv-iface: IPv4 first, else a global IPv6, else an error", "[iface]") {
  struct Row {
    const char* iface;
    const char* expect;  // nullptr: an error
  };
  const Row rows[] = {
      {"ib0", "10.20.0.5"},    // the first IPv4 address, though IPv6 ones come before it
      {"eth0", "10.10.0.5"},   // only IPv4
      {"fab6", "fd00:20::5"},  // IPv6 only: the link-local one is skipped, the unique-local one taken
      {"lo", "127.0.0.1"},     // loopback is what the user asked for: one-host tests
      {"ll0", nullptr},        // link-local only
      {"bare0", nullptr},      // no address at all
      {"down0", nullptr},      // down
      {"ib1", nullptr},        // no such interface
      {"", nullptr},
  };
  for (const auto& row : rows) {
    INFO(row.iface);
    if (row.expect) {
      CHECK(choose_iface_address(row.iface, node_interfaces(), "n5") == row.expect);
    } else {
      CHECK_THROWS_AS(choose_iface_address(row.iface, node_interfaces(), "n5"), Error);
    }
  }
}

TEST_CASE("rdzv-iface: each error names the interface, the node and the interfaces that would work",
          "[iface]") {
  const auto message = [](const std::string& iface) {
    try {
      choose_iface_address(iface, node_interfaces(), "n5");
    } catch (const Error& e) {
      CHECK(e.exit_code() == kUsageExit);
      return std::string(e.what());
    }
    FAIL("no error for " << iface);
    return std::string();
  };
  const std::string missing = message("ib1");
  CHECK(missing ==
        "--rdzv-iface ib1: node n5 has no interface ib1; its interfaces that are up with an address: lo, "
        "eth0, ib0, fab6; name one of them (ip -brief address) or drop --rdzv-iface");
  const std::string ll = message("ll0");
  CHECK(ll.find("interface ll0 on node n5 has no IPv4 or global IPv6 address (only link-local or loopback "
                "addresses (fe80::3, FEBF::9))") != std::string::npos);
  CHECK(ll.find("name another of its interfaces: lo, eth0, ib0, fab6") != std::string::npos);
  CHECK(message("bare0").find("(no address)") != std::string::npos);
  const std::string down = message("down0");
  CHECK(down.find("interface down0 is down on node n5") != std::string::npos);
  CHECK(down.find("name another of its interfaces: lo, eth0, ib0, fab6") != std::string::npos);
  // Never a suggestion that would fail the same way: a down interface, one without a usable address.
  for (const auto& m : {missing, ll, down}) {
    const std::string suggested = m.substr(m.rfind("interfaces"));
    for (const char* bad : {"down0", "bare0", "ll0"}) CHECK(suggested.find(bad) == std::string::npos);
  }
  for (const auto& m : {missing, ll}) CHECK(m.find('\n') == std::string::npos);
  // A node with no interfaces listed at all (getifaddrs failed) still says something whole.
  try {
    choose_iface_address("ib0", {}, "n5");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("its interfaces that are up with an address: none") !=
          std::string::npos);
  }
}

TEST_CASE("rdzv-iface: global IPv6 means reachable without a scope", "[iface]") {
  CHECK(is_global_v6("2001:db8::1"));
  CHECK(is_global_v6("fd00::1"));
  CHECK(is_global_v6("fec0::1"));  // site-local (deprecated), outside fe80::/10
  CHECK(is_global_v6("fe8::1"));   // a short first group is not fe80::/10
  CHECK_FALSE(is_global_v6("fe80::1"));
  CHECK_FALSE(is_global_v6("FE9F::1"));
  CHECK_FALSE(is_global_v6("febf::1"));
  CHECK_FALSE(is_global_v6("::1"));
  CHECK_FALSE(is_global_v6("::"));
  CHECK_FALSE(is_global_v6(""));
}
