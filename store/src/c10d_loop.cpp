#include "c10d_loop.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>

#include <fmt/core.h>

#include "store/error.hpp"

namespace ddprun::store {

C10dLoop::Impl::Impl() {
  epfd = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epfd < 0 || wake_fd < 0) {
    const int err = errno;
    if (epfd >= 0) ::close(epfd);
    if (wake_fd >= 0) ::close(wake_fd);
    throw Error(Error::Kind::io,
                fmt::format("worker store: cannot create its event loop: {}", std::strerror(err)));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // the wake-up descriptor
  ::epoll_ctl(epfd, EPOLL_CTL_ADD, wake_fd, &ev);
  thread = std::thread([this] { run(); });
}

C10dLoop::Impl::~Impl() {
  stop();
  ::close(wake_fd);
  ::close(epfd);
}

void C10dLoop::Impl::stop() {
  if (!thread.joinable()) return;
  stopping = true;
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(wake_fd, &one, sizeof one);
  if (on_loop()) {
    thread.detach();  // cannot join ourselves; run() returns after this batch
    return;
  }
  thread.join();
  drain_posted();  // what was posted too late still runs (closing handlers)
  graveyard.clear();
}

void C10dLoop::Impl::add(int fd, std::uint32_t events, c10d::Handler* h) {
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = h;
  if (::epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
    throw Error(Error::Kind::io, fmt::format("worker store: epoll_ctl: {}", std::strerror(errno)));
  }
}

void C10dLoop::Impl::modify(int fd, std::uint32_t events, c10d::Handler* h) {
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = h;
  ::epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev);
}

void C10dLoop::Impl::remove(int fd) {
  ::epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nullptr);
}

void C10dLoop::Impl::post(std::function<void()> fn) {
  if (on_loop()) {
    fn();
    return;
  }
  {
    std::lock_guard lock(mu);
    posted.push_back(std::move(fn));
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(wake_fd, &one, sizeof one);
}

void C10dLoop::Impl::call(const std::function<void()>& fn) {
  if (on_loop() || !thread.joinable()) {
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

void C10dLoop::Impl::drain_posted() {
  std::vector<std::function<void()>> todo;
  {
    std::lock_guard lock(mu);
    todo.swap(posted);
  }
  for (auto& fn : todo) fn();
}

void C10dLoop::Impl::run() {
  std::vector<epoll_event> events(1024);
  while (!stopping) {
    const int n = ::epoll_wait(epfd, events.data(), static_cast<int>(events.size()), -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < n; ++i) {
      auto* h = static_cast<c10d::Handler*>(events[static_cast<std::size_t>(i)].data.ptr);
      if (h == nullptr) {
        std::uint64_t v = 0;
        [[maybe_unused]] const auto r = ::read(wake_fd, &v, sizeof v);
        drain_posted();
        continue;
      }
      h->on_event(events[static_cast<std::size_t>(i)].events);
    }
    for (std::size_t f = 0; f < flushers.size(); ++f) flushers[f].second();
    graveyard.clear();
  }
}

C10dLoop::C10dLoop() : impl_(std::make_shared<Impl>()) {}
C10dLoop::~C10dLoop() = default;

}  // namespace ddprun::store
