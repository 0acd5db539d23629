#pragma once
// The workers' store's event loop: one epoll thread, level-triggered. Shared by the server
// (c10d_server.cpp) and the relay (c10d_relay.cpp); a C10dLoop can carry many of them (the bench
// hosts thousands of relays on one). Everything registered is touched only on the loop's thread;
// other threads reach it with post().
#include <sys/epoll.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "store/c10d_server.hpp"

namespace ddprun::store::c10d {

class Handler {
 public:
  virtual ~Handler() = default;
  virtual void on_event(std::uint32_t events) = 0;
};

}  // namespace ddprun::store::c10d

namespace ddprun::store {

struct C10dLoop::Impl {
  Impl();
  ~Impl();
  void add(int fd, std::uint32_t events, c10d::Handler* h);
  void modify(int fd, std::uint32_t events, c10d::Handler* h);
  void remove(int fd);
  // Runs `fn` on the loop's thread (at once when called there).
  void post(std::function<void()> fn);
  // Runs `fn` on the loop's thread and waits for it; `fn` must not throw.
  void call(const std::function<void()>& fn);
  bool on_loop() const { return std::this_thread::get_id() == thread.get_id(); }
  // Called after every batch of events, in registration order (flushing what the batch queued);
  // the id removes it again. Loop thread only.
  std::uint64_t after_batch(std::function<void()> fn) {
    flushers.emplace_back(++flusher_ids, std::move(fn));
    return flusher_ids;
  }
  void remove_after_batch(std::uint64_t id) {
    std::erase_if(flushers, [id](const auto& f) { return f.first == id; });
  }
  // Frees `h` once the current batch of events is through (its events may still be in it).
  void retire(std::unique_ptr<c10d::Handler> h) { graveyard.push_back(std::move(h)); }
  void stop();

  int epfd = -1;
  int wake_fd = -1;
  std::atomic<bool> stopping{false};
  std::mutex mu;
  std::vector<std::function<void()>> posted;
  std::vector<std::pair<std::uint64_t, std::function<void()>>> flushers;
  std::uint64_t flusher_ids = 0;
  std::vector<std::unique_ptr<c10d::Handler>> graveyard;
  std::thread thread;

 private:
  void run();
  void drain_posted();
};

}  // namespace ddprun::store
