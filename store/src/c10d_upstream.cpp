#include "c10d_upstream.hpp"

#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/core.h>

#include "c10d_conn.hpp"
#include "c10d_net.hpp"

namespace ddprun::store::c10d {

namespace {
using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kRetry{200};
// Answers are read from the front: see drop_consumed.
constexpr std::size_t kAnswerSlack = 64 * 1024;
constexpr std::size_t kRequestSlack = 1u << 20;
}  // namespace

struct Upstream::Retry final : Handler {
  explicit Retry(Upstream& u) : up(u) {}
  void on_event(std::uint32_t) override { up.on_retry(); }
  Upstream& up;
};

Upstream::Upstream(Loop& loop, UpstreamOptions options, UpstreamHooks hooks)
    : loop_(loop), opts_(std::move(options)), hooks_(std::move(hooks)) {
  // The tagged opening; requests queue behind it until the connection is up.
  out_.push_back(static_cast<char>(kRelayByte));
  put_u32(out_, kRelayMagic);
}

Upstream::~Upstream() = default;

void Upstream::start() {
  retry_fd_ = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (retry_fd_ >= 0) {
    retry_h_ = std::make_unique<Retry>(*this);
    loop_.watch(*retry_h_, retry_fd_, kReadable);
  }
  connect();
}

void Upstream::stop() {
  stopped_ = true;
  if (retry_fd_ >= 0) {
    loop_.unwatch(*retry_h_);
    ::close(retry_fd_);
    retry_fd_ = -1;
    loop_.retire(std::move(retry_h_));
  }
  if (fd_ >= 0) {
    loop_.unwatch(*this);
    close_reset(fd_);
    fd_ = -1;
  }
}

void Upstream::send(const Request& q) {
  out_ += encode_tagged(q);
  loop_.defer(*this);
}

void Upstream::connect() {
  bool done = false;
  fd_ = start_connect(opts_.host, opts_.port, done, opts_.source);
  if (fd_ < 0) {
    failed(std::strerror(errno));
    return;
  }
  loop_.watch(*this, fd_, kWritable);  // connected (or not) when writable
  if (done) on_event(kWritable);
}

void Upstream::failed(const std::string& why) {
  if (fd_ >= 0) {
    loop_.unwatch(*this);
    ::close(fd_);
    fd_ = -1;
  }
  const auto now = Clock::now();
  if (ready_ || (failing_since_ && now - *failing_since_ > opts_.connect_timeout) || retry_fd_ < 0) {
    // Lost after it was up (node 0's store is gone: the attempt is over), or never reached in time.
    dead_ = true;
    const std::string line = fmt::format("worker store relay: {} node 0's store at {}:{}: {}",
                                         ready_ ? "lost" : "cannot reach", opts_.host, opts_.port, why);
    const bool was_up = ready_;
    ready_ = false;
    hooks_.state(false);
    hooks_.gone(line, was_up);
    return;
  }
  if (!failing_since_) failing_since_ = now;
  itimerspec t{};
  t.it_value.tv_nsec = std::chrono::duration_cast<std::chrono::nanoseconds>(kRetry).count();
  ::timerfd_settime(retry_fd_, 0, &t, nullptr);
}

void Upstream::on_retry() {
  std::uint64_t n = 0;
  [[maybe_unused]] const auto r = ::read(retry_fd_, &n, sizeof n);
  if (!stopped_ && !dead_ && fd_ < 0) connect();
}

void Upstream::on_event(std::uint32_t ready) {
  if (fd_ < 0 || stopped_) return;
  if (!ready_) {
    const int err = connect_result(fd_);
    if (err != 0) {
      failed(std::strerror(err));
      return;
    }
    ready_ = true;
    failing_since_.reset();
    hooks_.state(true);
    loop_.defer(*this);  // the opening and what queued behind it
  }
  if ((ready & kBroken) != 0) {
    failed(std::strerror(connect_result(fd_)));
    return;
  }
  if ((ready & kReadable) != 0) read_answers();
  if (fd_ >= 0 && (ready & kWritable) != 0) loop_.defer(*this);
}

void Upstream::read_answers() {
  char* buf = read_buffer();
  const ssize_t n = ::recv(fd_, buf, kReadChunk, 0);
  if (n == 0) {
    failed("closed by node 0");
    return;
  }
  if (n < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) failed(std::strerror(errno));
    return;
  }
  in_.append(buf, static_cast<std::size_t>(n));
  split_answers();
}

// Answers from node 0: u32 tag, u32 length, the answer as a direct client gets it.
void Upstream::split_answers() {
  std::string_view in(in_);
  in.remove_prefix(in_off_);
  while (in.size() >= kTaggedHeader) {
    const std::uint32_t tag = get_u32(in, 0);
    const std::uint32_t len = get_u32(in, 4);
    if (in.size() < kTaggedHeader + len) break;
    hooks_.answer(tag, in.substr(kTaggedHeader, len));
    in.remove_prefix(kTaggedHeader + len);
  }
  in_off_ = in_.size() - in.size();
  drop_consumed(in_, in_off_, kAnswerSlack);
}

void Upstream::run_deferred() {
  if (fd_ < 0 || !ready_ || stopped_) return;
  while (out_off_ < out_.size()) {
    const ssize_t n = ::send(fd_, out_.data() + out_off_, out_.size() - out_off_, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      failed(std::strerror(errno));
      return;
    }
    out_off_ += static_cast<std::size_t>(n);
  }
  drop_consumed(out_, out_off_, kRequestSlack);
  loop_.want(*this, kReadable | (out_off_ < out_.size() ? kWritable : 0u));
}

}  // namespace ddprun::store::c10d
