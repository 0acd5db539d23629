// The same loop on Asio's io_context: each handler's descriptor is a posix::stream_descriptor (never
// owning it) with an async_wait per direction asked for, renewed after every event while still asked for.
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <atomic>
#include <thread>

#include "c10d_loop.hpp"

namespace ddprun::store::c10d {

namespace asio = boost::asio;

class AsioLoop final : public Loop {
 public:
  AsioLoop() : guard_(asio::make_work_guard(io_)) {
    thread_ = std::thread([this] { io_.run(); });
  }
  ~AsioLoop() override { AsioLoop::stop(); }

  void watch(Handler& h, int fd, std::uint32_t interest) override {
    h.sd_.emplace(io_, fd);  // registers it with the reactor (throws when it cannot)
    h.fd_ = fd;
    h.interest_ = interest;
    ++h.gen_;
    h.reading_ = h.writing_ = false;
    arm(h);
  }
  void want(Handler& h, std::uint32_t interest) override {
    if (!h.sd_) return;
    h.interest_ = interest;
    arm(h);
  }
  void unwatch(Handler& h) override {
    if (!h.sd_) return;
    h.sd_->release();  // cancels its waits; the descriptor stays its owner's to close
    h.sd_.reset();
    h.fd_ = -1;
    h.interest_ = 0;
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
    end_of_batch();
    free_retired(true);
  }

 private:
  void arm(Handler& h) {
    if ((h.interest_ & kReadable) != 0 && !h.reading_) wait(h, kReadable);
    if ((h.interest_ & kWritable) != 0 && !h.writing_) wait(h, kWritable);
  }
  void wait(Handler& h, std::uint32_t dir) {
    (dir == kReadable ? h.reading_ : h.writing_) = true;
    ++h.waits_;
    const auto what =
        dir == kReadable ? asio::posix::descriptor_base::wait_read : asio::posix::descriptor_base::wait_write;
    h.sd_->async_wait(what, [this, &h, dir, gen = h.gen_](const boost::system::error_code& ec) {
      --h.waits_;
      if (gen != h.gen_ || !h.sd_) return;  // unwatched (and maybe watching another descriptor since)
      (dir == kReadable ? h.reading_ : h.writing_) = false;
      if (ec == asio::error::operation_aborted) return;
      if ((h.interest_ & dir) != 0) h.on_event(ec ? kBroken : dir);
      if (gen == h.gen_ && h.sd_) arm(h);
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
  bool batch_posted_ = false;
  std::thread thread_;
  std::atomic<bool> joined_{false};
};

std::unique_ptr<Loop> make_asio_loop() {
  return std::make_unique<AsioLoop>();
}

}  // namespace ddprun::store::c10d
