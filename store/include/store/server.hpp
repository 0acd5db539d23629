#pragma once
// The store server: Boost.Asio, one io_context on one thread that the StoreServer owns.
// Everything it holds is guarded by being touched only from that thread.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "store/auth.hpp"
#include "store/codec.hpp"
#include "store/store.hpp"

namespace ddprun::store {

struct ServerOptions {
  std::string host = "0.0.0.0";  // address to listen on; "::" for IPv6
  std::uint16_t port = 0;        // 0 = ephemeral; StoreServer::port() tells which
  std::string run_id;            // clients presenting another run id are refused
  // 0 (default): follows the machine, connection_cap() of RLIMIT_NOFILE after raising its soft
  // limit to the hard one (store/limits.hpp). A peer over the cap is refused with a one-line error
  // naming the limit and the fix.
  std::size_t max_connections = 0;
  std::size_t max_waiters = 65536;  // blocked get/wait/wait_any requests at once
  // A connection must complete its handshake this fast (port scanners, half-open peers).
  std::chrono::milliseconds handshake_timeout{5000};
  // Connections without a liveness promise are closed after this long without a request; 0 = never.
  std::chrono::milliseconds idle_timeout{0};
  proto::Limits limits;
  // Who may talk to the store (rendezvous/auth.hpp); a hello without the right credential is
  // refused before anything else is read.
  auth::Config auth;
  // Where "rejected peer" lines go (rate-limited); unset = stderr.
  std::function<void(const std::string& line)> log;
  // Called on the server thread when a connection that gave a label in its handshake closes or
  // misses its liveness deadline (not when the server itself stops). Must not block, and must not
  // call back into this server synchronously.
  std::function<void(const std::string& label, const std::string& reason)> on_lost;
};

// Hellos the store refused, as a waiting node 0 names them (a node with a wrong token, another run's id):
// the peer's address and claimed label, the reason, and how many times. The label comes from an
// unauthenticated peer: cut to kMaxRefusalLabel bytes, control characters as '?'.
struct Refusal {
  std::string peer;   // numeric address, no port
  std::string label;  // the hello's connection label ("main/1"), as sent
  std::string why;
  std::uint64_t count = 0;
};
// Distinct (peer, reason, label) kept; later ones only count in refused_count().
inline constexpr std::size_t kMaxRefusalsKept = 8;
inline constexpr std::size_t kMaxRefusalLabel = 64;

class StoreServer {
 public:
  // Binds and starts serving on a background thread; throws store::Error when it cannot listen.
  explicit StoreServer(ServerOptions options);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  std::uint16_t port() const;
  // Closes the listener and every connection, then joins the thread. Idempotent. Not from on_lost.
  void stop();

  // Counters for tests and diagnostics.
  std::size_t connection_count() const;  // open connections now
  std::uint64_t dropped_count() const;   // connections dropped for protocol errors or timeouts
  std::uint64_t refused_count() const;   // connections refused: cap reached, run id, version, auth
  // The refused hellos, first kMaxRefusalsKept distinct ones (any thread).
  std::vector<Refusal> refusals() const;
  // Open connections whose handshake label starts with `prefix` (asks the server thread).
  std::size_t labelled_count(const std::string& prefix) const;
  // Their labels, so a caller can tell which peers are still connected.
  std::vector<std::string> labels(const std::string& prefix) const;
  // The numeric addresses (no port) of the peers connected now that passed their hello, each once:
  // the job's nodes, which alone may reach the workers' store (docs/security.md).
  std::vector<std::string> peer_hosts() const;
  // The connection cap in force (max_connections, or the one RLIMIT_NOFILE gave).
  std::size_t connection_limit() const;

  // Serves a request in-process on the server thread, as if a client had sent it: node 0's
  // own lost-agent monitor needs no connection. Waiting requests answer at once (timeout 0 is
  // used); heartbeat and watch are refused. Throws Error(io) when the server has stopped.
  proto::Response apply(proto::Request q) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A Store over StoreServer::apply(): node 0's in-process view of its own store. wait and
// wait_any only look (they never block the server thread).
class ServerStore final : public Store {
 public:
  explicit ServerStore(const StoreServer& server) : server_(server) {}
  void set(const std::string& key, const std::string& value) override;
  std::optional<std::string> get(const std::string& key, Millis timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  bool del(const std::string& key) override;
  std::int64_t num_keys() override;
  bool wait(const std::vector<std::string>& keys, Millis timeout) override;
  std::optional<std::size_t> wait_any(const std::vector<std::string>& keys, Millis timeout) override;

 private:
  const StoreServer& server_;
};

}  // namespace ddprun::store
