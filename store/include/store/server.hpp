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

namespace ddprun::rdzv {

struct ServerOptions {
  std::string host = "0.0.0.0";  // address to listen on; "::" for IPv6
  std::uint16_t port = 0;        // 0 = ephemeral; StoreServer::port() tells which
  std::string run_id;            // clients presenting another run id are refused
  std::size_t max_connections = 8192;
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

class StoreServer {
 public:
  // Binds and starts serving on a background thread; throws rdzv::Error when it cannot listen.
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
  // Open connections whose handshake label starts with `prefix` (asks the server thread).
  std::size_t labelled_count(const std::string& prefix) const;
  // Their labels, so a caller can tell which peers are still connected.
  std::vector<std::string> labels(const std::string& prefix) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddprun::rdzv
