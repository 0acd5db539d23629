#include "worker_store.hpp"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/worker_store.hpp"
#include "store/error.hpp"
#include "store/sockaddr.hpp"

namespace ddprun::launcher {

namespace {

// MASTER_ADDR's addresses as this node resolves them, numeric and normalized; empty when it does not.
std::vector<std::string> resolve_numeric(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::vector<std::string> out;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return out;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    sockaddr_storage ss{};
    std::memcpy(&ss, a->ai_addr, std::min<std::size_t>(a->ai_addrlen, sizeof ss));
    const std::string n = store::numeric_host_of(ss);
    if (!n.empty()) out.push_back(n);
  }
  ::freeaddrinfo(res);
  return out;
}

std::unique_ptr<store::C10dServer> open_server(const std::vector<std::string>& hosts, std::uint16_t port,
                                               bool filter, store::c10d::Layout legacy,
                                               const std::function<void(const std::string&)>& log) {
  store::C10dServerOptions o;
  o.hosts = hosts;
  o.port = port;
  o.legacy = legacy;
  o.filter_peers = filter;
  o.log = log;
  return std::make_unique<store::C10dServer>(std::move(o));
}

}  // namespace

std::uint16_t WorkerStoreHost::master_port(const core::JobConstants& job, std::uint16_t avoid, bool given,
                                           bool several_nodes, const std::vector<std::string>& peers) {
  if (job.worker_store != core::WorkerStore::rank0) {
    return serve(job.master_addr, job.master_port, avoid, given, several_nodes, peers);
  }
  auto chosen = choose_master_port(job.master_port, avoid, given, std::move(rank0_hold_));
  rank0_hold_ = std::move(chosen.hold);
  return chosen.port;
}

std::uint16_t WorkerStoreHost::serve(const std::string& master_addr, int planned, std::uint16_t avoid,
                                     bool given, bool several_nodes, const std::vector<std::string>& peers) {
  if (server_ && addr_ == master_addr) {
    server_->reset();
    server_->allow_peers(peers);
    return server_->port();
  }
  server_.reset();
  hold_ = PortHold{};
  const auto hosts =
      core::worker_store_hosts(resolve_numeric(master_addr), store::local_addresses(), several_nodes);
  const bool filter = several_nodes;
  const auto port = planned > 0 && planned <= 65535 ? static_cast<std::uint16_t>(planned) : std::uint16_t{0};
  if (port != 0 && port != avoid) {
    std::string why = "is already in use on this node";  // or claimed by another ddprun job here
    if (auto hold = PortHold::take(port)) {
      try {
        server_ = open_server(hosts, port, filter, legacy_, log_);
        hold_ = std::move(*hold);
      } catch (const store::Error& e) {
        if (e.kind() != store::Error::Kind::address_in_use) {
          why = fmt::format("cannot be served: {}", e.what());
        }
      }
    }
    if (!server_ && given) {
      throw core::Error(fmt::format("--master-port {} {}; free it, give another port, or drop --master-port "
                                    "(and DDPRUN_MASTER_PORT) to let ddprun pick a free one",
                                    port, why),
                        1);
    }
  } else if (given && port == avoid) {
    throw core::Error(fmt::format("--master-port {} is the rendezvous store's port", port), 1);
  }
  // Busy and not given: the next free port above the planned one below the ephemeral range, as
  // choose_master_port picks for rank0 (29501, 29502, ...), then a free ephemeral port, on every host alike.
  for (const std::uint16_t p : master_port_fallbacks(planned, avoid, ephemeral_port_range().first)) {
    if (server_) break;
    auto hold = PortHold::take(p);
    if (!hold || !port_is_free(p)) continue;
    try {
      server_ = open_server(hosts, p, filter, legacy_, log_);
      hold_ = std::move(*hold);
    } catch (const store::Error&) {  // taken since the check: the next one
    }
  }
  for (int i = 0; !server_ && i < 20; ++i) {
    try {
      auto s = open_server(hosts, 0, filter, legacy_, log_);
      if (s->port() == avoid) continue;
      auto hold = PortHold::take(s->port());
      if (!hold) continue;
      hold_ = std::move(*hold);
      server_ = std::move(s);
    } catch (const store::Error& e) {
      if (i == 19) throw core::Error(e.what(), 1);
    }
  }
  if (!server_) throw core::Error("cannot find a free TCP port for MASTER_PORT on this node", 1);
  addr_ = master_addr;
  server_->allow_peers(peers);
  return server_->port();
}

void WorkerStoreHost::relay(const core::JobConstants& job, int node_rank, std::vector<core::Worker>& local) {
  relay_.reset();
  if (node_rank != 0) server_.reset();  // not node 0 (any more): it serves nothing
  if (job.worker_store != core::WorkerStore::relay || node_rank == 0 || local.empty()) return;
  store::C10dRelayOptions o;
  o.host = "127.0.0.1";
  o.port = core::relay_port(job.run_id, node_rank, static_cast<std::uint16_t>(job.master_port));
  o.upstream_host = job.master_addr;
  o.upstream_port = static_cast<std::uint16_t>(job.master_port);
  o.legacy = legacy_;
  o.log = log_;
  try {
    relay_ = std::make_unique<store::C10dRelay>(o);
  } catch (const store::Error&) {
    const auto planned = o.port;
    o.port = 0;
    relay_ = std::make_unique<store::C10dRelay>(o);
    log_(fmt::format("worker store relay: port {} is busy on this node; its workers use {}", planned,
                     relay_->port()));
  }
  for (auto& w : local) w.env["MASTER_PORT"] = std::to_string(relay_->port());
}

}  // namespace ddprun::launcher
