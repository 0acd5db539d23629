#include "c10d_loop.hpp"

#include <boost/asio/post.hpp>

#include <future>

namespace ddprun::store::c10d {

namespace asio = boost::asio;

Loop::Loop() : guard_(asio::make_work_guard(io_)) {
  thread_ = std::thread([this] { io_.run(); });
}

Loop::~Loop() {
  stop();
}

void Loop::stop() {
  if (!thread_.joinable()) return;
  guard_.reset();
  if (on_loop()) {
    io_.stop();
    thread_.detach();  // cannot join ourselves; run() returns after this handler
    joined_ = true;
    return;
  }
  // What was posted before still runs (closing handlers); then nothing waits any more.
  asio::post(io_, [this] { io_.stop(); });
  thread_.join();
  joined_ = true;
  end_of_batch();
  free_retired(true);
}

void Loop::watch(Handler& h, int fd, std::uint32_t interest) {
  h.sd_.emplace(io_, fd);  // registers it with the reactor (throws when it cannot)
  h.interest_ = interest;
  ++h.gen_;
  h.reading_ = h.writing_ = false;
  arm(h);
}

void Loop::want(Handler& h, std::uint32_t interest) {
  if (!h.sd_) return;
  h.interest_ = interest;
  arm(h);
}

void Loop::unwatch(Handler& h) {
  if (!h.sd_) return;
  h.sd_->release();  // cancels its waits, which still complete (aborted)
  h.sd_.reset();
  h.interest_ = 0;
}

// Level-triggered on top of Asio: a wait per direction asked for, renewed after each event while still
// asked for (Asio re-arms the descriptor for each wait, so bytes left unread are reported again).
void Loop::arm(Handler& h) {
  if ((h.interest_ & kReadable) != 0 && !h.reading_) wait(h, kReadable);
  if ((h.interest_ & kWritable) != 0 && !h.writing_) wait(h, kWritable);
}

void Loop::wait(Handler& h, std::uint32_t dir) {
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

void Loop::post(std::function<void()> fn) {
  if (on_loop()) {
    fn();
    return;
  }
  asio::post(io_, std::move(fn));
}

void Loop::call(const std::function<void()>& fn) {
  if (on_loop() || joined_) {
    fn();
    return;
  }
  std::promise<void> done;
  auto fut = done.get_future();
  post([&] {
    fn();
    done.set_value();
  });
  fut.wait();
}

void Loop::defer(Deferred& d) {
  if (d.queued_) return;
  d.queued_ = true;
  deferred_.push_back(&d);
  want_end_of_batch();
}

void Loop::retire(std::unique_ptr<Handler> h) {
  graveyard_.push_back(std::move(h));
  want_end_of_batch();
}

// Posted behind the handlers already ready: runs once they are through.
void Loop::want_end_of_batch() {
  if (batch_posted_) return;
  batch_posted_ = true;
  asio::post(io_, [this] {
    batch_posted_ = false;
    end_of_batch();
  });
}

void Loop::end_of_batch() {
  // By index: running one may defer another.
  for (std::size_t i = 0; i < deferred_.size(); ++i) {
    Deferred* d = deferred_[i];
    d->queued_ = false;
    d->run_deferred();
  }
  deferred_.clear();
  free_retired(false);
}

void Loop::free_retired(bool all) {
  std::erase_if(graveyard_, [all](const std::unique_ptr<Handler>& h) { return all || h->waits_ == 0; });
  if (!graveyard_.empty()) want_end_of_batch();  // a wait cancelled by unwatch() is still to come
}

}  // namespace ddprun::store::c10d

namespace ddprun::store {

C10dLoop::C10dLoop() : impl_(std::make_unique<c10d::Loop>()) {}
C10dLoop::~C10dLoop() = default;

}  // namespace ddprun::store
