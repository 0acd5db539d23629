#pragma once
// The workers' store's event loop: one thread running an Asio io_context, which tells handlers when
// their descriptors are ready (level-triggered: a handler that leaves bytes unread hears again). The
// handlers do their own non-blocking reads and writes (one read buffer per thread serves them all), so
// an idle connection holds no buffer. Shared by the server and the relay (c10d_conn.hpp); one loop can
// carry many of them (the bench puts thousands of relays on one). Everything registered is touched only
// on the loop's thread; other threads reach it with post() or call(). Why Asio and not a hand-written
// epoll loop: docs/architecture.md, "Why the workers' store runs on Asio".
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "store/c10d_server.hpp"

namespace ddprun::store::c10d {

// What a handler asks to hear about and what it is told: readable (data, end of stream, or an error
// that the next read returns), writable, broken (an error on the socket).
inline constexpr std::uint32_t kReadable = 1;
inline constexpr std::uint32_t kWritable = 2;
inline constexpr std::uint32_t kBroken = 4;

// One descriptor on the loop (a listener, a connection, a timer) and what is done when it is ready.
class Handler {
 public:
  virtual ~Handler() = default;
  virtual void on_event(std::uint32_t ready) = 0;

 private:
  friend class Loop;
  // The descriptor (never owned: its owner closes it), one async_wait per direction asked for, and
  // which watch() a wait belongs to. The handler is freed only once no wait of it is in flight.
  std::optional<boost::asio::posix::stream_descriptor> sd_;
  std::uint32_t interest_ = 0;
  unsigned waits_ = 0;
  unsigned gen_ = 0;
  bool reading_ = false;
  bool writing_ = false;
};

// Work held until the current batch of events is through: a connection's answers, so that all the
// answers one batch produced for it leave in one send.
class Deferred {
 public:
  virtual ~Deferred() = default;
  virtual void run_deferred() = 0;

 private:
  friend class Loop;
  bool queued_ = false;
};

class Loop {
 public:
  Loop();
  ~Loop();
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  // `h` hears of `fd`'s events in `interest` (kReadable, kWritable) until unwatch(h).
  void watch(Handler& h, int fd, std::uint32_t interest);
  void want(Handler& h, std::uint32_t interest);
  void unwatch(Handler& h);  // the descriptor stays its owner's to close
  // Runs `fn` on the loop's thread (at once when called there).
  void post(std::function<void()> fn);
  // Runs `fn` on the loop's thread and waits for it; `fn` must not throw.
  void call(const std::function<void()>& fn);
  bool on_loop() const { return std::this_thread::get_id() == thread_.get_id(); }
  // Runs `d` once after the current batch of events, however often it is deferred meanwhile.
  void defer(Deferred& d);
  // Frees `h` (unwatched) once the current batch of events is through: its events may still be in it.
  void retire(std::unique_ptr<Handler> h);
  // Ends the thread; what was posted before still runs. Idempotent.
  void stop();

 private:
  void arm(Handler& h);
  void wait(Handler& h, std::uint32_t dir);
  void want_end_of_batch();
  void end_of_batch();
  void free_retired(bool all);

  boost::asio::io_context io_{1};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;
  std::vector<Deferred*> deferred_;
  std::vector<std::unique_ptr<Handler>> graveyard_;
  bool batch_posted_ = false;
  std::thread thread_;
  std::atomic<bool> joined_{false};
};

}  // namespace ddprun::store::c10d

namespace ddprun::store {

// The store's own access to a C10dLoop's implementation (the public header keeps it private).
struct C10dLoopAccess {
  static c10d::Loop& of(C10dLoop& l) { return *l.impl_; }
};

}  // namespace ddprun::store
