#pragma once
// The connections of a workers' store server or relay: accepting them (in bursts, within the
// connection cap and the descriptors there are), reading and parsing each one's requests, sending its
// answers in order, pausing one whose answers pile up, closing. The server and the relay differ only in
// what a request does (Dispatch).
#include <sys/socket.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "c10d_loop.hpp"
#include "store/auth.hpp"
#include "store/c10d_codec.hpp"
#include "store/c10d_server.hpp"
#include "store/limits.hpp"

namespace ddprun::store::c10d {

class Conns;

// One peer: a worker, or on node 0 also a relay speaking for a node's workers.
struct Conn final : Handler, Deferred {
  Conn(Conns& owner, int f, std::uint64_t sr, const sockaddr_storage& from, const Limits& l, Layout legacy)
      : conns(owner), fd(f), serial(sr), peer(from), parser(l, legacy) {}
  void on_event(std::uint32_t ready) override;
  void run_deferred() override;  // sends what the batch answered
  std::size_t unsent() const { return out.size() - out_off; }
  bool relay() const { return parser.relay(); }

  Conns& conns;
  int fd;
  std::uint64_t serial;  // never reused: answers that outlive a connection find no other one
  sockaddr_storage peer;
  Parser parser;
  std::string in;  // bytes of a request not yet whole, from in_off on
  std::size_t in_off = 0;
  std::string out;  // answers the socket has not taken yet, from out_off on
  std::size_t out_off = 0;
  bool want_out = false;  // asked to hear when writable
  bool paused = false;    // reading stopped until its answers drain
  bool closed = false;
};

// What a server or relay does with its connections' requests.
class Dispatch {
 public:
  virtual ~Dispatch() = default;
  // One request of `c`. Answers are appended to c.out, then Conns::answered(c). Throws store::Error for a
  // request that breaks the protocol or a limit: `c` is then closed and the reason logged.
  virtual void on_request(Conn& c, Request& q) = 0;
  // `c` is closing: drop what it waits for.
  virtual void on_close(Conn& c) = 0;
  // Why a new peer is refused; nullopt admits it.
  virtual std::optional<std::string> refusal(const sockaddr_storage& peer) = 0;
};

struct ConnOptions : C10dConnOptions {
  std::string who;    // how its log lines begin: "worker store", "worker store relay"
  std::string where;  // where the open-file limit is raised: "node 0", "this node"
};

class Conns {
 public:
  Conns(Loop& loop, Dispatch& dispatch, ConnOptions options);
  ~Conns();
  Conns(const Conns&) = delete;
  Conns& operator=(const Conns&) = delete;

  // Loop thread only, from here on.
  void listen(int fd);  // accepts on `fd`, which it now owns
  void close_listeners();
  Conn* find(std::uint64_t serial);
  void answered(Conn& c) { loop_.defer(c); }  // c.out grew: sent after the batch
  void close(Conn& c, const std::string& reason, bool error);
  void close_all(const std::string& reason);
  // Accepts every connection the kernel has queued: close_all() then closes the connections made before
  // it, whether or not the loop had heard of them (a posted call may run before the loop polls again).
  void accept_queued();
  std::size_t buffered_bytes() const;  // what every connection's buffers hold
  // A rate-limited log line (a storm of bad peers must not flood the agent's output).
  void log_limited(const std::string& line);
  void log(const std::string& line) const;

  // Any thread.
  std::size_t size() const { return n_conns_; }
  std::uint64_t refused() const { return n_refused_; }
  std::uint64_t dropped() const { return n_dropped_; }
  std::uint64_t requests() const { return n_requests_; }

 private:
  friend struct Conn;
  struct Listener;
  bool accept_some(int lfd);  // false once the listener's queue is empty (or descriptors ran out)
  void admit(int fd, const sockaddr_storage& peer);
  void out_of_descriptors(int lfd);
  std::optional<std::string> refusal(const sockaddr_storage& peer);
  void read_some(Conn& c);
  void process(Conn& c, std::string_view data);
  void keep_unparsed(Conn& c, std::string_view rest, bool held);
  void flush(Conn& c);
  void set_interest(Conn& c);
  std::string limit_advice() const;

  Loop& loop_;
  Dispatch& dispatch_;
  ConnOptions opts_;
  FdLimits fd_limits_;
  std::size_t max_conns_ = 0;
  int spare_fd_ = -1;  // given up to accept-and-close a peer when descriptors run out
  std::vector<std::unique_ptr<Listener>> listeners_;
  std::unordered_map<std::uint64_t, std::unique_ptr<Conn>> conns_;
  std::uint64_t next_serial_ = 0;
  auth::LogLimiter limiter_{5, std::chrono::seconds(10)};
  std::atomic<std::size_t> n_conns_{0};
  std::atomic<std::uint64_t> n_refused_{0};
  std::atomic<std::uint64_t> n_dropped_{0};
  std::atomic<std::uint64_t> n_requests_{0};
};

// Drops the consumed front of a buffer read from its front (`off` bytes): all of it once all is
// consumed; before that only when the front is past `slack` bytes and more than half the buffer. So a
// peer that always leaves part of a request (or of its answers) in it costs what is live, not all it
// ever sent, and each byte is moved about once at most.
void drop_consumed(std::string& buf, std::size_t& off, std::size_t slack);

// Where one read lands: a buffer per thread, shared by every connection on that loop (they are served
// one at a time, and each takes what it keeps out of it at once).
inline constexpr std::size_t kReadChunk = 64 * 1024;
char* read_buffer();

}  // namespace ddprun::store::c10d
