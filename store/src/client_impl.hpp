#pragma once
// TcpStore's insides, shared by its units: client.cpp (the public calls), client_connect.cpp
// (resolving, connecting with backoff, the hello) and client_call.cpp (requests, answers,
// pipelined sets, closing).
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "store/client.hpp"
#include "store/codec.hpp"
#include "store/error.hpp"

namespace ddprun::store {
namespace detail {

using Clock = std::chrono::steady_clock;

// Pipelined sets in flight before a set waits for the answers (bounds what the server queues).
inline constexpr std::size_t kMaxUnacked = 4;

// One failed connect attempt, for the error that lists them all.
struct Attempt {
  std::string target;  // "addr:port" or "host:port"
  std::string error;
};

// One address of the endpoint.
struct Address {
  sockaddr_storage addr{};
  socklen_t len = 0;
  const sockaddr* sa() const { return reinterpret_cast<const sockaddr*>(&addr); }
};

// Waits until fd is ready for `events` or the deadline passes. Returns an empty string when
// ready, else why not ("timed out", or the poll error).
std::string wait_fd(int fd, short events, Clock::time_point deadline);

}  // namespace detail

struct TcpStore::Impl {
  using Clock = detail::Clock;

  explicit Impl(ClientOptions o)
      : opts(std::move(o)),
        where(fmt::format("{}:{}", opts.host, opts.port)),
        parser(opts.limits.max_message) {}

  ClientOptions opts;
  std::string where;
  mutable std::mutex mu;
  std::atomic<int> fd{-1};
  std::string broken;          // why the connection is gone (empty while healthy)
  bool hello_pending = false;  // the server's answer to our hello is not read yet
  // Keys of sets sent whose acknowledgements are not read yet (in order, behind the hello's).
  std::vector<std::string> unacked;
  proto::FrameParser parser;
  std::vector<char> buf = std::vector<char>(4096);
  // One writer at a time: calls (under mu too) and heartbeats from the watching thread (only this).
  // Closing takes it too, so a heartbeat never writes to a descriptor closed (and reused) under it;
  // recursive because a failed write closes. Order: mu, then wmu.
  std::recursive_mutex wmu;
  // In-order answers poll_events read before a call asked for them (pipelined sets' acks).
  std::deque<proto::Response> answers;
  // Out-of-band events, and when any frame last came (steady clock ticks).
  std::mutex ev_mu;
  std::vector<TcpStore::Event> events;
  std::atomic<Clock::rep> last_heard{Clock::now().time_since_epoch().count()};

  std::atomic<std::uint64_t> received{0};
  void heard(std::size_t n) {
    received += n;
    last_heard = Clock::now().time_since_epoch().count();
  }
  // Sets an out-of-band frame aside; false for an in-order answer.
  bool take_out_of_band(proto::Response& r);
  // Reads what the socket has now without waiting (poll_events); throws once it is lost.
  void pump();

  // client_connect.cpp
  void connect();
  bool connect_round(Clock::time_point deadline, std::vector<detail::Attempt>& attempts);
  bool try_address(const detail::Address& a, Clock::time_point deadline, std::string& err);
  void handshake(Clock::time_point deadline);
  void check_hello(Clock::time_point deadline, const std::string& op, const std::string& key);

  // client_call.cpp
  [[noreturn]] void fail(Error::Kind kind, const std::string& op, const std::string& key,
                         const std::string& why);
  void drop(const std::string& why);
  void close_quietly();
  void write_all(const std::string& frame, Clock::time_point deadline, const std::string& op,
                 const std::string& key, int flags = 0);
  proto::Response read_response(Clock::time_point deadline, const std::string& op, const std::string& key);
  void drain(Clock::time_point deadline, const std::string& op, const std::string& key);
  void require_connected(const std::string& op, const std::string& key) const;
  // `pipelined`: send the request and return without reading its answer (sets only: their answer
  // carries nothing but success, which the next call or flush() checks).
  proto::Response call(const proto::Request& q, Millis wait = Millis{0}, bool pipelined = false);
  void check_key(const std::string& key, const char* op) const;
};

}  // namespace ddprun::store
