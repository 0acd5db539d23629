#pragma once
// The workers' store's event loop: one thread that tells handlers when their descriptors are ready
// (level-triggered: a handler that leaves bytes unread hears again). Shared by the server and the relay
// (c10d_conn.hpp); one loop can carry many of them (the bench puts thousands of relays on one).
// Everything registered is touched only on the loop's thread; other threads reach it with post() or call().
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "store/c10d_server.hpp"

namespace ddprun::store::c10d {

// What a handler asks to hear about and what it is told: readable (data, end of stream, or an error
// that the next read returns), writable, broken (an error on the socket).
inline constexpr std::uint32_t kReadable = 1;
inline constexpr std::uint32_t kWritable = 2;
inline constexpr std::uint32_t kBroken = 4;

class Handler {
 public:
  virtual ~Handler() = default;
  virtual void on_event(std::uint32_t ready) = 0;
};

class Loop;

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
  // Registers `fd` for the events in `interest` (kReadable, kWritable); `h` hears of them until remove().
  virtual void add(int fd, std::uint32_t interest, Handler* h) = 0;
  virtual void modify(int fd, std::uint32_t interest, Handler* h) = 0;
  virtual void remove(int fd) = 0;
  // Runs `fn` on the loop's thread (at once when called there).
  virtual void post(std::function<void()> fn) = 0;
  // Runs `fn` on the loop's thread and waits for it; `fn` must not throw.
  void call(const std::function<void()>& fn);
  virtual bool on_loop() const = 0;
  virtual bool running() const = 0;  // false once stopped
  // Runs `d` once after the current batch of events, however often it is deferred meanwhile.
  void defer(Deferred& d);
  // Frees `h` once the current batch of events is through (its events may still be in it).
  void retire(std::unique_ptr<Handler> h);
  // Ends the thread; what was posted meanwhile still runs. Idempotent.
  virtual void stop() = 0;

 protected:
  // After each batch: the deferred work, in the order it was deferred (it may defer more), then the
  // retired handlers are freed.
  void end_of_batch();
  // Asks the loop to call end_of_batch() soon (the epoll loop does after every batch anyway).
  virtual void want_end_of_batch() {}

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
