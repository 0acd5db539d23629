#pragma once
// StoreServer's insides, shared by its units: server.cpp (listening, accepting, the public API),
// connection.cpp (reading, dispatching, writing, closing), handshake.cpp and waiters.cpp.
// Everything here is touched only from the server thread, except the atomics.
#include <sys/socket.h>

#include <array>
#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "store/answer.hpp"
#include "store/auth.hpp"
#include "store/codec.hpp"
#include "store/limits.hpp"
#include "store/server.hpp"
#include "store/store.hpp"
#include "waiters.hpp"

namespace ddprun::store::detail {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
inline constexpr auto use_nothrow = asio::as_tuple(asio::use_awaitable);

// An answer waiting for the socket: a frame of its own, or one shared by many connections (a
// fan-out encodes once), and how much of it has left.
struct OutFrame {
  std::shared_ptr<const std::string> buf;
  std::size_t off = 0;
};
using Shared = std::shared_ptr<const std::string>;

struct Conn {
  explicit Conn(tcp::socket s) : sock(std::move(s)), watchdog(sock.get_executor()) {}
  tcp::socket sock;
  asio::steady_timer watchdog;
  Clock::time_point deadline = Clock::time_point::max();
  std::string label;
  sockaddr_storage peer_addr{};  // for the rejected-peer log line
  std::chrono::milliseconds liveness{0};
  bool open = true;
  bool hello_done = false;
  bool over_cap = false;  // admitted only to be told, at its hello, that the cap is reached
  bool watchdog_armed = false;
  // A get/wait/wait_any is blocked: the protocol allows no request behind it (docs/protocol.md).
  bool blocked = false;
  bool writing = false;
  bool close_after_write = false;
  std::string close_reason;
  std::deque<OutFrame> outq;
  std::vector<std::string> subscribed;  // the keys of its watch, in order (event index)
  // While the frames of one read are served, their answers collect here and go out in one write.
  bool batching = false;
  std::string batch;
  WaiterPtr waiter;
};
using ConnPtr = std::shared_ptr<Conn>;

}  // namespace ddprun::store::detail

namespace ddprun::store {

struct StoreServer::Impl {
  using Conn = detail::Conn;
  using ConnPtr = detail::ConnPtr;
  using tcp = detail::tcp;

  explicit Impl(ServerOptions o) : opts(std::move(o)), acceptor(io), verifier(opts.auth, opts.run_id) {}

  ServerOptions opts;
  boost::asio::io_context io{1};
  // Keeps io.run() going while nothing is pending (accepting has its own thread); shutdown_now ends it.
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> keep_running{io.get_executor()};
  std::array<char, 65536> read_buf{};  // shared by every connection: reads happen on this thread only
  tcp::acceptor acceptor;
  std::uint16_t bound_port = 0;
  StoreData data;
  detail::Waiters waiters;
  std::unordered_set<ConnPtr> conns;
  // Watched keys: subscriber -> its index of the key (the event's number).
  std::unordered_map<std::string, std::unordered_map<Conn*, std::pair<ConnPtr, std::uint32_t>>> subscribers;
  // A get's answer for a large value, encoded once and shared until the key changes: 16k agents
  // reading one plan must not each cost the server two copies of it.
  std::unordered_map<std::string, detail::Shared> get_frames;
  FdLimits fd_limits;
  std::size_t max_conns = 0;  // in force: opts.max_connections, or what RLIMIT_NOFILE allows
  std::atomic<std::size_t> n_conns{0};
  std::atomic<std::uint64_t> n_dropped{0};
  std::atomic<std::uint64_t> n_refused{0};
  mutable std::mutex refusals_mu;
  std::vector<Refusal> refusals;  // guarded by refusals_mu: written here, read by any thread
  auth::Verifier verifier;
  // A port scan or a misconfigured job must not flood node 0's stderr.
  auth::LogLimiter log_limit{5, std::chrono::seconds(10)};
  bool stopping = false;
  std::atomic<bool> stopped{false};
  std::thread thread;
  // Accepting has its own thread: a server thread busy serving 16k agents must not let the kernel's
  // accept queue (net.core.somaxconn) overflow, which costs each dropped agent a 1 s SYN-ACK retry.
  std::thread accept_thread;
  int accept_stop_fd = -1;  // an eventfd that wakes the accept thread to end

  // server.cpp
  void listen();
  void accept_loop();  // on accept_thread; hands each batch of descriptors to the server thread
  void admit(int fd, const sockaddr_storage& peer);
  void refuse_over_cap(int fd);
  void shutdown_now();

  // connection.cpp
  void arm_watchdog(const ConnPtr& c);
  void on_watchdog(const ConnPtr& c);
  void touch(Conn& c);
  boost::asio::awaitable<void> session(ConnPtr c);
  boost::system::error_code read_rest(Conn& c, proto::FrameParser& parser);
  void serve_frames(const ConnPtr& c, proto::FrameParser& parser);
  void handle(const ConnPtr& c, proto::Request q);
  // Applies a request to the data (connections and apply() alike) and wakes what it changed.
  Answer apply_request(proto::Request q);
  // The shared get answer for `key`, or null when the value is missing or small.
  detail::Shared shared_get_frame(const std::string& key);
  void watch(const ConnPtr& c, proto::Request q);
  void unsubscribe(Conn& c);
  // After a write to `key`: its value goes to every subscriber, encoded once per event index.
  void publish(const std::string& key);
  void on_changed(const std::string& key);
  bool bytes_waiting(Conn& c);
  bool batched(const ConnPtr& c, std::string_view frame);
  void send(const ConnPtr& c, std::string frame);
  void send_shared(const ConnPtr& c, detail::Shared frame);
  std::optional<std::size_t> write_now(const ConnPtr& c, std::string_view bytes);
  void enqueue(const ConnPtr& c, detail::OutFrame f);
  boost::asio::awaitable<void> write_loop(ConnPtr c);
  // graceful: FIN after what is queued; abortive: reset, queued data dropped; peer_gone: the peer
  // closed or reset, so a plain close() (a shutdown would be a syscall for nothing).
  enum class Closing { graceful, abortive, peer_gone };
  void close(const ConnPtr& c, const std::string& reason, Closing how = Closing::graceful);

  // handshake.cpp
  void handshake(const ConnPtr& c, const std::string& payload);
  void record_refusal(const Conn& c, const std::string& label, const std::string& why);
  void log_rejection(const Conn& c, const std::string& label, const std::string& why);
  void log_rejection_line(const std::string& why);
  void emit_log(const std::string& line);

  // waiters.cpp
  void block(const ConnPtr& c, proto::Request q);
  boost::asio::awaitable<void> wait_for(ConnPtr c, proto::Request q);
};

}  // namespace ddprun::store
