// The addresses the nodes advertise, checked together (issue 35 §13): one line when nodes of different
// host names share one address or advertise a loopback one; nothing for one host's agents on loopback.
#include <catch2/catch.hpp>

#include "core/advertised.hpp"

using namespace ddprun::core;

TEST_CASE("loopback addresses: 127.0.0.0/8, ::1, mapped IPv4 and localhost", "[advertised]") {
  for (const char* a :
       {"127.0.0.1", "127.0.1.7", "::1", "0:0:0:0:0:0:0:1", "::ffff:127.0.0.1", "localhost", "LocalHost"}) {
    INFO(a);
    CHECK(is_loopback_address(a));
  }
  for (const char* a : {"", "10.0.0.1", "128.0.0.1", "fd00::1", "::", "1127.0.0.1", "127.0.0", "node127",
                        "127.example.org", "::ffff:10.0.0.1"}) {
    INFO(a);
    CHECK_FALSE(is_loopback_address(a));
  }
}

TEST_CASE("advertised addresses: warned when they would send the nodes to the wrong machine",
          "[advertised]") {
  struct Row {
    std::vector<AdvertisedNode> nodes;
    std::string warning;  // "" for none
  };
  const std::string opt = "--rdzv-iface lo";
  for (
      const Row& row : std::vector<Row>{
          // Loopback tests: several agents of one host name on 127.0.0.1.
          {{{"ws", "127.0.0.1"}, {"ws", "127.0.0.1"}, {"ws", "127.0.0.1"}}, ""},
          // Each node its own address, or its name (no --rdzv-iface).
          {{{"node1", "10.0.0.1"}, {"node2", "10.0.0.2"}}, ""},
          {{{"node1", "node1"}, {"node2", "node2"}}, ""},
          // One node: nobody else would dial it.
          {{{"node1", "127.0.0.1"}}, ""},
          // Unknown hosts or addresses (a dry run knows only its own).
          {{{"node1", "10.0.0.1"}, {"", "10.0.0.1"}}, ""},
          {{{"node1", ""}, {"node2", ""}}, ""},
          // --rdzv-iface lo under Slurm: every node on 127.0.0.1.
          {{{"node1", "127.0.0.1"}, {"node2", "127.0.0.1"}},
           "node1, node2 advertise 127.0.0.1, a loopback address (--rdzv-iface lo), in a job of 2 host "
           "names: "
           "the other nodes and the workers there would reach their own machine; choose the interface of the "
           "network between the nodes (e.g. --rdzv-iface ib0)"},
          // One loopback node among real ones: the others would dial themselves for it.
          {{{"node1", "10.0.0.1"}, {"node2", "127.0.1.1"}, {"node3", "10.0.0.3"}},
           "node2 advertises 127.0.1.1, a loopback address (--rdzv-iface lo), in a job of 3 host names: "},
          // A dry run: this node's address, the others unknown.
          {{{"node1", "::1"}, {"node2", ""}}, "node1 advertises ::1, a loopback address"},
          // One address for different hosts (--local-addr in a script every node runs).
          {{{"node1", "10.0.0.5"}, {"node2", "10.0.0.5"}, {"node3", "10.0.0.6"}},
           "node1, node2 all advertise 10.0.0.5 (--rdzv-iface lo): the other nodes and the workers would "
           "reach "
           "one machine for all of them; give each node its own address (--rdzv-iface IFACE, which each node "
           "looks up on itself)"},
          // Many: four named, the rest counted.
          {{{"a", "127.0.0.1"},
            {"b", "127.0.0.1"},
            {"c", "127.0.0.1"},
            {"d", "127.0.0.1"},
            {"e", "127.0.0.1"},
            {"f", "127.0.0.1"}},
           "a, b, c, d and 2 more advertise 127.0.0.1, a loopback address (--rdzv-iface lo), in a job of 6 "
           "host "
           "names"},
      }) {
    const auto w = advertised_address_warning(row.nodes, opt);
    INFO(row.nodes.size() << " nodes, first " << row.nodes.front().host << " " << row.nodes.front().addr);
    if (row.warning.empty()) {
      CHECK_FALSE(w);
    } else {
      REQUIRE(w);
      CHECK_THAT(*w, Catch::StartsWith(row.warning));
      CHECK(w->find('\n') == std::string::npos);
    }
  }
}

TEST_CASE("advertised addresses: 16,384 nodes on one loopback address make one bounded line",
          "[advertised]") {
  std::vector<AdvertisedNode> nodes;
  for (int i = 0; i < 16384; ++i) nodes.push_back({"node" + std::to_string(i), "127.0.0.1"});
  const auto w = advertised_address_warning(nodes, "DDPRUN_RDZV_IFACE=lo");
  REQUIRE(w);
  CHECK_THAT(*w, Catch::StartsWith("node0, node1, node2, node3 and 16380 more advertise 127.0.0.1") &&
                     Catch::Contains("(DDPRUN_RDZV_IFACE=lo), in a job of 16384 host names"));
  CHECK(w->size() < 400);
}
