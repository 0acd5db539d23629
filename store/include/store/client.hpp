#pragma once
// TcpStore: the client side of the store protocol.
//
// Plain POSIX sockets with poll() deadlines: one descriptor per client (close-on-exec), no thread,
// no event loop, so thousands of clients in one process stay cheap.
//
// Thread-safety: every call takes the client's mutex, so a TcpStore may be shared between
// threads, but calls are serialised: a blocking wait holds the connection until it returns. Use
// one TcpStore per thread that needs to block independently.
//
// Pipelining: set() returns once its request is sent; its answer is read by the next call (or
// flush(), or the destructor, which waits for it up to min(op_timeout, 5 s)). Requests on one
// connection are served in order, so this client reads its own writes; a failed set surfaces from
// the next call. At most 4 sets are in flight. This saves a round trip per set, as c10d's
// unacknowledged set does, without giving up the acknowledgement.
//
// Failure model: every call has a deadline (op_timeout, plus the requested wait for blocking
// calls). A timeout or I/O error closes the connection; later calls fail at once with the same
// cause (no silent reconnect: a lost store means a lost rendezvous).
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "store/auth.hpp"
#include "store/codec.hpp"
#include "store/store.hpp"

namespace ddprun::store {

struct ClientOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  std::string run_id;
  Millis connect_timeout{60000};  // total time for all connect attempts
  Millis op_timeout{30000};       // per call, on top of any wait the call asks for
  std::string label;              // names this connection in the server's lost-peer reports
  Millis liveness{0};             // >0: the server drops us if we send nothing for this long
  Millis backoff_initial{50};     // first retry delay; doubles, with +-50% jitter
  Millis backoff_max{1000};
  // false (default): the hello is pipelined with the first call, saving a round trip per
  // connection; a refusal (run id, version) then surfaces from the first call, as Kind::rejected.
  // true: the constructor waits for the server's answer and throws a refusal itself.
  bool wait_for_handshake = false;
  // true: one round of connect attempts (every address of the endpoint once, no retry), for a caller
  // that tries several endpoints in turn; each attempt still has up to connect_timeout for the hello.
  bool one_round = false;
  proto::Limits limits;
  auth::Config auth;  // must match the server's mode (rendezvous/auth.hpp)
};

class TcpStore final : public Store {
 public:
  // Connects now, retrying refused/unreachable endpoints until connect_timeout, and sends the
  // hello. Throws Error of Kind::timeout listing every attempt (host, port, errno text) when the
  // endpoint never accepted. A refusal by the server (version, credential) is Kind::rejected, by a
  // store of another run Kind::other_run, thrown by the first call (or here with wait_for_handshake).
  explicit TcpStore(ClientOptions options);
  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

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

  // A pipelined set that never waits (a status record, overwritten each second): false, and nothing
  // sent, when another call holds the connection, the hello is unanswered, or kMaxUnacked sets are
  // still unanswered after reading what has come. Throws Error once the connection is lost.
  bool try_set(const std::string& key, const std::string& value);

  // Reads every outstanding answer (the hello's, pipelined sets'); throws what they report.
  void flush();
  // The same, bounded by `limit` instead of op_timeout (an end-of-run record on a hung node 0).
  void flush(Millis limit);
  void ping();

  // ---- one connection per agent (docs/protocol.md): watch, heartbeat, pushed events

  // Sets this connection's label and liveness promise (0: none) and subscribes it to `keys`: the
  // value of each, now if present and after every write, arrives as an event (poll_events). Events of
  // the keys watched before, not yet polled, are dropped.
  void watch(const std::string& label, Millis liveness, const std::vector<std::string>& keys);
  // Sends a heartbeat frame at once, even while another thread's call is blocked on this
  // connection. With `want_pong` the server answers it out of band (a pong), which last_heard()
  // then shows. False when the connection is gone.
  bool heartbeat(bool want_pong = true);
  struct Event {
    std::size_t index = 0;  // of the key in watch()'s list
    std::string value;
  };
  // For the thread that watches: waits up to `timeout` (or until `wake_fd` is readable) for frames,
  // reads them unless a call is reading them itself, and returns the events that came (also those a
  // call set aside). Never holds up a call for long. Throws Error(io) once the connection is lost and
  // every event that came before is returned.
  std::vector<Event> poll_events(Millis timeout, int wake_fd = -1);
  // Bytes read from the server on this connection so far (the issue-16 traffic budget).
  std::uint64_t bytes_received() const;
  // When the last frame of any kind came from the server (the connect time before any).
  std::chrono::steady_clock::time_point last_heard() const;
  // Closes the connection; later calls fail. Safe to call from another thread to interrupt a
  // blocked call (it then fails promptly).
  void close();
  bool connected() const;
  std::string endpoint() const;  // "host:port"
  int native_handle() const;     // the socket, for tests (close-on-exec checks); -1 when closed

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddprun::store
