#pragma once
// The workers' store's event loop: one thread that tells handlers when their descriptors are ready
// (level-triggered: a handler that leaves bytes unread hears again). Shared by the server and the relay
// (c10d_conn.hpp); one loop can carry many of them (the bench puts thousands of relays on one).
// Everything registered is touched only on the loop's thread; other threads reach it with post() or call().
#include <boost/asio/posix/stream_descriptor.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "store/c10d_server.hpp"

namespace ddprun::store::c10d {

// What a handler asks to hear about and what it is told: readable (data, end of stream, or an error
// that the next read returns), writable, broken (an error on the socket).
inline constexpr std::uint32_t kReadable = 1;
inline constexpr std::uint32_t kWritable = 2;
inline constexpr std::uint32_t kBroken = 4;

class Loop;

// One descriptor on the loop (a listener, a connection, a timer) and what is done when it is ready.
class Handler {
 public:
  virtual ~Handler() = default;
  virtual void on_event(std::uint32_t ready) = 0;

 private:
  friend class Loop;
  friend class AsioLoop;
  friend class EpollLoop;
  int fd_ = -1;
  std::uint32_t interest_ = 0;
  // Asio: the descriptor's waits in flight (the handler is freed only without any), which watch() they
  // belong to, and whether one per direction is pending.
  std::optional<boost::asio::posix::stream_descriptor> sd_;
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
  virtual ~Loop() = default;
  // `h` hears of `fd`'s events in `interest` (kReadable, kWritable) until unwatch(h).
  virtual void watch(Handler& h, int fd, std::uint32_t interest) = 0;
  virtual void want(Handler& h, std::uint32_t interest) = 0;
  virtual void unwatch(Handler& h) = 0;  // the descriptor stays its owner's to close
  // Runs `fn` on the loop's thread (at once when called there).
  virtual void post(std::function<void()> fn) = 0;
  // Runs `fn` on the loop's thread and waits for it; `fn` must not throw.
  void call(const std::function<void()>& fn);
  virtual bool on_loop() const = 0;
  virtual bool running() const = 0;  // false once stopped
  // Runs `d` once after the current batch of events, however often it is deferred meanwhile.
  void defer(Deferred& d);
  // Frees `h` (unwatched) once the current batch of events is through: its events may still be in it.
  void retire(std::unique_ptr<Handler> h);
  // Ends the thread; what was posted meanwhile still runs. Idempotent.
  virtual void stop() = 0;

 protected:
  // After each batch: the deferred work, in the order it was deferred (it may defer more), then the
  // retired handlers that nothing refers to any more are freed.
  void end_of_batch();
  void free_retired(bool all);
  // Asks the loop to call end_of_batch() soon (the epoll loop does after every batch anyway).
  virtual void want_end_of_batch() {}
  static int& fd_of(Handler& h) { return h.fd_; }
  static std::uint32_t& interest_of(Handler& h) { return h.interest_; }

 private:
  std::vector<Deferred*> deferred_;
  std::vector<std::unique_ptr<Handler>> graveyard_;
};

std::unique_ptr<Loop> make_epoll_loop();
std::unique_ptr<Loop> make_asio_loop();

}  // namespace ddprun::store::c10d

namespace ddprun::store {

// The store's own access to a C10dLoop's implementation (the public header keeps it private).
struct C10dLoopAccess {
  static c10d::Loop& of(C10dLoop& l) { return *l.impl_; }
};

}  // namespace ddprun::store
