#pragma once
// The workers' store on this node (docs/rendezvous.md, "The workers' store"): node 0's agent serves
// PyTorch's TCPStore protocol on MASTER_PORT (store/c10d_server.hpp) from before the attempt's first
// worker starts until the attempt ends, with a fresh keyspace each attempt. Private to the launcher.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/plan.hpp"
#include "core/plan_table.hpp"
#include "launcher/system.hpp"
#include "store/c10d_server.hpp"

namespace ddprun::launcher {

// Who may reach the workers' store: the addresses the agents' store connections come from
// (`connected`) and, when the agents advertise another network's address (--rdzv-iface, --local-addr),
// those too: their workers connect from there. A host name among them never matches a numeric peer.
template <typename Joined>
std::vector<std::string> worker_store_peers(const std::vector<Joined>& nodes,
                                            std::vector<std::string> connected) {
  for (const auto& n : nodes) {
    if (!n.addr.empty() && n.addr != n.hostname) connected.push_back(n.addr);
  }
  return connected;
}

class WorkerStoreHost {
 public:
  // `legacy_21`: --worker-store-legacy 2.1 (docs/protocol.md, "Three opcode layouts on one port").
  WorkerStoreHost(std::function<void(const std::string&)> log, bool legacy_21)
      : log_(std::move(log)), legacy_(legacy_21 ? store::c10d::Layout::v21 : store::c10d::Layout::v1) {}

  // The attempt's MASTER_PORT, on the node that hosts the store, before its plan is published: the one
  // place it is chosen. --worker-store rank0: a port claimed for worker rank 0 to listen on
  // (choose_master_port, the claim kept across attempts); otherwise the port serve() serves.
  std::uint16_t master_port(const core::JobConstants& job, std::uint16_t avoid, bool given,
                            bool several_nodes, const std::vector<std::string>& peers);

  // On the node that hosts the store (node 0; standalone: the only node), before the attempt's
  // plan is published: serves for this attempt and returns the MASTER_PORT the plan publishes. The
  // first call binds MASTER_ADDR's own addresses (core::worker_store_hosts) on `planned`, or on a
  // free port when that is busy or `avoid` and was not `given` (given and busy: core::Error, exit 1).
  // A later call for the same address keeps its port and drops every key and connection of the last
  // attempt. A port another ddprun job here claims counts as busy. `peers`: the other nodes' addresses, the
  // only remote peers admitted when `several_nodes`.
  std::uint16_t serve(const std::string& master_addr, int planned, std::uint16_t avoid, bool given,
                      bool several_nodes, const std::vector<std::string>& peers);

  // --worker-store relay, on a node other than 0, once the attempt's plan is known: drops the last
  // attempt's relay and serves this node's workers on 127.0.0.1 at the derived relay port (the one in
  // `local`'s MASTER_PORT), forwarding to node 0's store. A busy port is replaced by a free one, and
  // `local`'s MASTER_PORT with it.
  void relay(const core::JobConstants& job, int node_rank, std::vector<core::Worker>& local);
  // The end of this node's part in serving: a relay (or a server, when this node is no longer
  // node 0) of the last attempt goes.
  void drop_relay() { relay_.reset(); }

 private:
  std::function<void(const std::string&)> log_;
  store::c10d::Layout legacy_;
  std::unique_ptr<store::C10dServer> server_;
  PortHold rank0_hold_;  // rank0: other ddprun jobs here stay off MASTER_PORT while this one runs
  PortHold hold_;        // the served port's claim (launcher/system.hpp): a rank0 job here never takes it
  std::unique_ptr<store::C10dRelay> relay_;
  std::string addr_;  // the MASTER_ADDR it serves for
};

}  // namespace ddprun::launcher
