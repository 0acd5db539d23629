#include "c10d_loop.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>

#include <fmt/core.h>

#include "store/error.hpp"

namespace ddprun::store::c10d {

void Loop::call(const std::function<void()>& fn) {
  if (on_loop() || !running()) {
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

namespace {

std::uint32_t epoll_interest(std::uint32_t interest) {
  std::uint32_t ev = 0;
  if ((interest & kReadable) != 0) ev |= EPOLLIN | EPOLLRDHUP;
  if ((interest & kWritable) != 0) ev |= EPOLLOUT;
  return ev;
}

std::uint32_t ready_of(std::uint32_t events) {
  std::uint32_t r = 0;
  if ((events & (EPOLLIN | EPOLLHUP | EPOLLRDHUP)) != 0) r |= kReadable;
  if ((events & EPOLLOUT) != 0) r |= kWritable;
  if ((events & EPOLLERR) != 0) r |= kBroken;
  return r;
}

}  // namespace

// epoll, level-triggered, and an eventfd that wakes it for posted work.
class EpollLoop final : public Loop {
 public:
  EpollLoop() {
    epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (epfd_ < 0 || wake_fd_ < 0) {
      const int err = errno;
      if (epfd_ >= 0) ::close(epfd_);
      if (wake_fd_ >= 0) ::close(wake_fd_);
      throw Error(Error::Kind::io,
                  fmt::format("worker store: cannot create its event loop: {}", std::strerror(err)));
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = nullptr;  // the wake-up descriptor
    ::epoll_ctl(epfd_, EPOLL_CTL_ADD, wake_fd_, &ev);
    thread_ = std::thread([this] { run(); });
  }
  ~EpollLoop() override {
    EpollLoop::stop();
    ::close(wake_fd_);
    ::close(epfd_);
  }

  void watch(Handler& h, int fd, std::uint32_t interest) override {
    epoll_event ev{};
    ev.events = epoll_interest(interest);
    ev.data.ptr = &h;
    if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      throw Error(Error::Kind::io, fmt::format("worker store: epoll_ctl: {}", std::strerror(errno)));
    }
    fd_of(h) = fd;
    interest_of(h) = interest;
  }
  void want(Handler& h, std::uint32_t interest) override {
    if (fd_of(h) < 0 || interest_of(h) == interest) return;
    interest_of(h) = interest;
    epoll_event ev{};
    ev.events = epoll_interest(interest);
    ev.data.ptr = &h;
    ::epoll_ctl(epfd_, EPOLL_CTL_MOD, fd_of(h), &ev);
  }
  void unwatch(Handler& h) override {
    if (fd_of(h) < 0) return;
    ::epoll_ctl(epfd_, EPOLL_CTL_DEL, fd_of(h), nullptr);
    fd_of(h) = -1;
    interest_of(h) = 0;
  }

  void post(std::function<void()> fn) override {
    if (on_loop()) {
      fn();
      return;
    }
    {
      std::lock_guard lock(mu_);
      posted_.push_back(std::move(fn));
    }
    wake();
  }
  bool on_loop() const override { return std::this_thread::get_id() == thread_.get_id(); }
  bool running() const override { return !joined_; }

  void stop() override {
    if (!thread_.joinable()) return;
    stopping_ = true;
    wake();
    if (on_loop()) {
      thread_.detach();  // cannot join ourselves; run() returns after this batch
      joined_ = true;
      return;
    }
    thread_.join();
    joined_ = true;
    drain_posted();  // what was posted too late still runs (closing handlers)
    end_of_batch();
    free_retired(true);
  }

 private:
  void wake() {
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto n = ::write(wake_fd_, &one, sizeof one);
  }
  void drain_posted() {
    std::vector<std::function<void()>> todo;
    {
      std::lock_guard lock(mu_);
      todo.swap(posted_);
    }
    for (auto& fn : todo) fn();
  }
  void run() {
    std::vector<epoll_event> events(1024);
    while (!stopping_) {
      const int n = ::epoll_wait(epfd_, events.data(), static_cast<int>(events.size()), -1);
      if (n < 0) {
        if (errno == EINTR) continue;
        break;
      }
      for (int i = 0; i < n; ++i) {
        const epoll_event& e = events[static_cast<std::size_t>(i)];
        auto* h = static_cast<Handler*>(e.data.ptr);
        if (h == nullptr) {
          std::uint64_t v = 0;
          [[maybe_unused]] const auto r = ::read(wake_fd_, &v, sizeof v);
          drain_posted();
          continue;
        }
        h->on_event(ready_of(e.events));
      }
      end_of_batch();
    }
  }

  int epfd_ = -1;
  int wake_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::vector<std::function<void()>> posted_;
  std::thread thread_;
  std::atomic<bool> joined_{false};
};

std::unique_ptr<Loop> make_epoll_loop() {
  return std::make_unique<EpollLoop>();
}

}  // namespace ddprun::store::c10d

namespace ddprun::store {

C10dLoop::C10dLoop(Kind kind)
    : impl_(kind == Kind::asio ? c10d::make_asio_loop() : c10d::make_epoll_loop()) {}
C10dLoop::~C10dLoop() {
  if (impl_) impl_->stop();
}

}  // namespace ddprun::store
