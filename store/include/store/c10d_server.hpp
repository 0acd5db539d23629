#pragma once
// The workers' store (docs/rendezvous.md, "The workers' store"): PyTorch's TCPStore protocol,
// served by node 0's agent on MASTER_PORT for the whole attempt, so every worker is a pure client
// (TORCHELASTIC_USE_AGENT_STORE=True) and no worker's death takes the store away. One port serves
// torch 1.x to the newest (store/c10d_codec.hpp). C10dRelay is the node-local relay of
// `--worker-store relay`: it serves its node's workers and forwards to node 0 over one connection.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "store/c10d_codec.hpp"

namespace ddprun::store {

namespace c10d {
class Loop;
}

// The thread (an Asio io_context) that serves workers' stores and relays. Each server and relay gets
// its own unless given one to share (the bench puts thousands of relays on one).
class C10dLoop {
 public:
  C10dLoop();
  ~C10dLoop();
  C10dLoop(const C10dLoop&) = delete;
  C10dLoop& operator=(const C10dLoop&) = delete;

 private:
  friend struct C10dLoopAccess;
  std::unique_ptr<c10d::Loop> impl_;
};

// How the server and the relay treat the connections of workers, alike.
struct C10dConnOptions {
  c10d::Limits limits;
  c10d::Layout legacy = c10d::Layout::v1;  // how connections without VALIDATE are read (codec)
  // 0: follows the machine (RLIMIT_NOFILE raised to its hard limit, store/limits.hpp). Peers over
  // the cap are closed at once, with a rate-limited log line naming the cap and the fix.
  std::size_t max_connections = 0;
  // Answers not yet taken by a peer's socket: over this, no more requests are read from it until
  // they drain (a client that never reads costs this much, then nothing).
  std::size_t max_unsent = 64u << 20;
  std::function<void(const std::string& line)> log;  // unset: stderr
};

struct C10dServerOptions : C10dConnOptions {
  // Numeric addresses to listen on, one listener each ("0.0.0.0", "::", "10.1.2.3").
  std::vector<std::string> hosts{"0.0.0.0"};
  std::uint16_t port = 0;                               // 0 = ephemeral; port() tells which
  std::size_t max_stored_bytes = std::size_t{4} << 30;  // keys and values of the whole store
  std::size_t max_reply = 256u << 20;                   // one MULTI_GET's answer
  std::size_t max_waiting = 16u << 20;                  // keys awaited by pending WAITs, in all
  // true: only peers from the addresses given to allow_peers() connect, and (admit_local) from
  // this host's own addresses and loopback.
  bool filter_peers = false;
  bool admit_local = true;
  std::shared_ptr<C10dLoop> loop;  // unset: its own thread
};

class C10dServer {
 public:
  // Binds every host and starts serving; throws store::Error naming the address when it cannot.
  explicit C10dServer(C10dServerOptions options);
  ~C10dServer();
  C10dServer(const C10dServer&) = delete;
  C10dServer& operator=(const C10dServer&) = delete;

  std::uint16_t port() const;
  // A fresh keyspace for the next attempt: every connection is closed and every key, queue, wait
  // and watch dropped; the listeners stay, so the port is never free for someone else to take.
  void reset();
  // The addresses (numeric) of the job's nodes; with filter_peers, the only remote peers admitted.
  void allow_peers(const std::vector<std::string>& addresses);
  // Closes the listeners and every connection. Idempotent.
  void stop();

  // For tests and the bench.
  std::size_t connection_count() const;
  std::uint64_t refused_count() const;  // peers not of the job, or over the connection cap
  std::uint64_t dropped_count() const;  // connections closed for a protocol error or a limit
  std::size_t key_count() const;
  std::uint64_t request_count() const;
  // Bytes its connections hold: requests not yet whole, answers not yet sent, and what was consumed of
  // them and not yet dropped.
  std::size_t buffered_bytes() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

struct C10dRelayOptions : C10dConnOptions {
  std::string host = "127.0.0.1";  // where this node's workers connect (numeric)
  std::uint16_t port = 0;          // 0 = ephemeral
  std::string upstream_host;       // node 0's workers' store
  std::uint16_t upstream_port = 0;
  // Numeric IPv4 address to connect from (unset: the kernel's choice; one that cannot be bound counts as
  // node 0 not reached). The bench gives each simulated node its own, as each node has on a cluster.
  std::string source_host;
  // How long to keep trying node 0's store when it cannot be reached (it is up before any worker of the
  // attempt starts, so this is for a network hiccup). Requests wait meanwhile; past it, the workers'
  // connections are closed.
  std::chrono::milliseconds connect_timeout{60000};
  std::size_t max_upstream = 256u << 20;  // requests not yet taken by node 0's socket
  std::shared_ptr<C10dLoop> loop;         // unset: its own thread
};

// Serves its node's workers as C10dServer does and forwards every request to node 0's store over one
// connection (a tagged form of the 2.2+ protocol, docs/protocol.md): node 0 then sees one connection per
// node. VALIDATE, PING and CANCEL_WAIT are answered here; identical WAITs and GETs of several workers in
// flight together travel once.
class C10dRelay {
 public:
  explicit C10dRelay(C10dRelayOptions options);  // binds; throws store::Error naming the address
  ~C10dRelay();
  C10dRelay(const C10dRelay&) = delete;
  C10dRelay& operator=(const C10dRelay&) = delete;
  std::uint16_t port() const;
  void stop();
  std::size_t connection_count() const;
  bool upstream_connected() const;
  std::uint64_t forwarded_count() const;  // requests sent to node 0
  std::uint64_t request_count() const;    // requests read from workers
  std::size_t buffered_bytes() const;     // as C10dServer's, for the workers' connections

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace ddprun::store
