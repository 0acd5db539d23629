// The same loop on Asio's io_context: each registered descriptor is a posix::stream_descriptor (never
// owning it) with an async_wait per direction asked for, renewed after every event while still asked for.
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>

#include <atomic>
#include <thread>
#include <unordered_map>

#include "c10d_loop.hpp"

namespace ddprun::store::c10d {

namespace {

namespace asio = boost::asio;

class AsioLoop final : public Loop {
 public:
  AsioLoop() : guard_(asio::make_work_guard(io_)) {
    thread_ = std::thread([this] { io_.run(); });
  }
  ~AsioLoop() override { AsioLoop::stop(); }

  void add(int fd, std::uint32_t interest, Handler* h) override {
    auto w = std::make_shared<Watch>(io_, fd);
    w->h = h;
    w->interest = interest;
    watches_[fd] = w;
    arm(w);
  }
  void modify(int fd, std::uint32_t interest, Handler* h) override {
    const auto it = watches_.find(fd);
    if (it == watches_.end()) return;
    it->second->h = h;
    it->second->interest = interest;
    arm(it->second);
  }
  void remove(int fd) override {
    const auto it = watches_.find(fd);
    if (it == watches_.end()) return;
    it->second->gone = true;
    it->second->sd.release();  // cancels its waits; the descriptor stays its owner's to close
    watches_.erase(it);
  }
  void post(std::function<void()> fn) override {
    if (on_loop()) {
      fn();
      return;
    }
    asio::post(io_, std::move(fn));
  }
  bool on_loop() const override { return std::this_thread::get_id() == thread_.get_id(); }
  bool running() const override { return !joined_; }

  void stop() override {
    if (!thread_.joinable()) return;
    guard_.reset();
    if (on_loop()) {
      io_.stop();
      thread_.detach();
      joined_ = true;
      return;
    }
    // What was posted before still runs; then nothing waits any more.
    asio::post(io_, [this] { io_.stop(); });
    thread_.join();
    joined_ = true;
    for (auto& [fd, w] : watches_) {
      w->gone = true;
      w->sd.release();
    }
    watches_.clear();
    end_of_batch();
  }

 private:
  struct Watch {
    Watch(asio::io_context& io, int fd) : sd(io, fd) {}
    asio::posix::stream_descriptor sd;
    Handler* h = nullptr;
    std::uint32_t interest = 0;
    bool reading = false;
    bool writing = false;
    bool gone = false;
  };

  void arm(const std::shared_ptr<Watch>& w) {
    if ((w->interest & kReadable) != 0 && !w->reading) wait(w, kReadable);
    if ((w->interest & kWritable) != 0 && !w->writing) wait(w, kWritable);
  }
  void wait(const std::shared_ptr<Watch>& w, std::uint32_t dir) {
    (dir == kReadable ? w->reading : w->writing) = true;
    const auto what =
        dir == kReadable ? asio::posix::descriptor_base::wait_read : asio::posix::descriptor_base::wait_write;
    w->sd.async_wait(what, [this, w, dir](const boost::system::error_code& ec) {
      (dir == kReadable ? w->reading : w->writing) = false;
      if (w->gone || ec == asio::error::operation_aborted) return;
      if ((w->interest & dir) != 0) w->h->on_event(ec ? kBroken : dir);
      if (!w->gone) arm(w);
    });
  }
  void want_end_of_batch() override {
    if (batch_posted_) return;
    batch_posted_ = true;
    asio::post(io_, [this] {
      batch_posted_ = false;
      end_of_batch();
    });
  }

  asio::io_context io_{1};
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::unordered_map<int, std::shared_ptr<Watch>> watches_;
  bool batch_posted_ = false;
  std::thread thread_;
  std::atomic<bool> joined_{false};
};

}  // namespace

std::unique_ptr<Loop> make_asio_loop() {
  return std::make_unique<AsioLoop>();
}

}  // namespace ddprun::store::c10d
