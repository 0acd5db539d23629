#include "c10d_conn.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>

#include <fmt/core.h>

#include "c10d_net.hpp"
#include "store/error.hpp"
#include "store/sockaddr.hpp"

namespace ddprun::store::c10d {

namespace {

// Accepts per wake-up, so that a connection storm does not starve the requests of those already in.
constexpr int kAcceptBurst = 512;
// drop_consumed's slack: requests are small, answers can be large (a MULTI_GET, a 64 MiB value).
constexpr std::size_t kInSlack = 4096;
constexpr std::size_t kOutSlack = 1u << 20;

int open_spare() {
  return ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

}  // namespace

void drop_consumed(std::string& buf, std::size_t& off, std::size_t slack) {
  if (off == buf.size()) {
    buf.clear();
    off = 0;
  } else if (off > slack && off * 2 > buf.size()) {
    buf.erase(0, off);
    off = 0;
  }
}

char* read_buffer() {
  thread_local std::array<char, kReadChunk> buf{};
  return buf.data();
}

struct Conns::Listener final : Handler {
  Listener(Conns& c, int f) : conns(c), fd(f) {}
  void on_event(std::uint32_t) override {
    if (fd >= 0) conns.accept_some(fd);  // closed: an event of the current batch
  }
  Conns& conns;
  int fd;
};

void Conn::on_event(std::uint32_t ready) {
  if (closed) return;
  if ((ready & kBroken) != 0) {
    conns.close(*this, "socket error", false);
    return;
  }
  if ((ready & kWritable) != 0) conns.flush(*this);
  if (!closed && !paused && (ready & kReadable) != 0) conns.read_some(*this);
}

void Conn::run_deferred() {
  if (!closed) conns.flush(*this);
}

Conns::Conns(Loop& loop, Dispatch& dispatch, ConnOptions options)
    : loop_(loop), dispatch_(dispatch), opts_(std::move(options)) {
  fd_limits_ = raise_fd_limit();
  max_conns_ = opts_.max_connections != 0 ? opts_.max_connections : connection_cap(fd_limits_.soft);
  spare_fd_ = open_spare();
}

Conns::~Conns() {
  if (spare_fd_ >= 0) ::close(spare_fd_);
}

void Conns::listen(int fd) {
  auto l = std::make_unique<Listener>(*this, fd);
  loop_.watch(*l, fd, kReadable);
  listeners_.push_back(std::move(l));
}

void Conns::close_listeners() {
  for (auto& l : listeners_) {
    loop_.unwatch(*l);
    ::close(l->fd);
    l->fd = -1;
    loop_.retire(std::move(l));
  }
  listeners_.clear();
}

Conn* Conns::find(std::uint64_t serial) {
  const auto it = conns_.find(serial);
  return it == conns_.end() ? nullptr : it->second.get();
}

// ---- accepting ----

void Conns::accept_queued() {
  for (const auto& l : listeners_) {
    while (accept_some(l->fd)) {
    }
  }
}

bool Conns::accept_some(int lfd) {
  // Another thread of the process may have taken the spare's number while it was given up: try again.
  if (spare_fd_ < 0) spare_fd_ = open_spare();
  for (int i = 0; i < kAcceptBurst; ++i) {
    sockaddr_storage peer{};
    socklen_t len = sizeof peer;
    const int fd = ::accept4(lfd, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) out_of_descriptors(lfd);
      return false;
    }
    if (auto why = refusal(peer)) {
      ++n_refused_;
      log_limited(*why);
      close_reset(fd);
      continue;
    }
    admit(fd, peer);
  }
  return true;  // more may be queued
}

void Conns::admit(int fd, const sockaddr_storage& peer) {
  // TCP_NODELAY comes from the listener (c10d_net.cpp).
  const std::uint64_t serial = ++next_serial_;
  auto c = std::make_unique<Conn>(*this, fd, serial, peer, opts_.limits, opts_.legacy);
  try {
    loop_.watch(*c, fd, kReadable);
  } catch (const std::exception& e) {  // the kernel's epoll limits: this peer only
    ++n_refused_;
    log_limited(fmt::format("{}: refused {}: {}", opts_.who,
                            sockaddr_text(reinterpret_cast<const sockaddr*>(&peer)), e.what()));
    close_reset(fd);
    return;
  }
  conns_.emplace(serial, std::move(c));
  n_conns_ = conns_.size();
}

// Out of descriptors: take the peer off the queue with the spare one and close it, or the listener would
// stay readable and spin the loop (every server and relay sharing it).
void Conns::out_of_descriptors(int lfd) {
  ++n_refused_;
  if (spare_fd_ >= 0) {
    ::close(spare_fd_);
    const int victim = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (victim >= 0) ::close(victim);
    spare_fd_ = open_spare();
  }
  log_limited(fmt::format("{}: out of file descriptors at {} connections; {}", opts_.who, conns_.size(),
                          limit_advice()));
}

std::optional<std::string> Conns::refusal(const sockaddr_storage& peer) {
  if (auto why = dispatch_.refusal(peer)) {
    return fmt::format("{}: refused {}: {}", opts_.who,
                       sockaddr_text(reinterpret_cast<const sockaddr*>(&peer)), *why);
  }
  if (conns_.size() >= max_conns_) {
    return fmt::format("{}: reached its connection limit of {}; {}", opts_.who, max_conns_, limit_advice());
  }
  return std::nullopt;
}

std::string Conns::limit_advice() const {
  return fmt::format(
      "open-file limit RLIMIT_NOFILE {} (hard {}): raise it on {} (ulimit -n, limits.conf or Slurm's "
      "PropagateResourceLimits); each worker needs one descriptor",
      fd_limits_.soft,
      fd_limits_.hard == RLIM_INFINITY ? std::string("unlimited") : std::to_string(fd_limits_.hard),
      opts_.where);
}

// ---- one connection ----

void Conns::read_some(Conn& c) {
  char* buf = read_buffer();
  const ssize_t n = ::recv(c.fd, buf, kReadChunk, 0);
  if (n == 0) {
    close(c, "closed by peer", false);
    return;
  }
  if (n < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) close(c, std::strerror(errno), false);
    return;
  }
  process(c, std::string_view(buf, static_cast<std::size_t>(n)));
}

// Parses straight from the read when nothing is held over, and keeps only what is not yet a request.
void Conns::process(Conn& c, std::string_view data) {
  const bool held = c.in_off < c.in.size();
  if (held) c.in.append(data);
  std::string_view view = held ? std::string_view(c.in).substr(c.in_off) : data;
  try {
    while (!c.closed && !c.paused && view.size() >= c.parser.needed()) {
      auto q = c.parser.next(view);
      if (!q) break;
      ++n_requests_;
      dispatch_.on_request(c, *q);
      if (c.unsent() > opts_.max_unsent) {
        c.paused = true;  // answers pile up: read nothing more until they drain
        set_interest(c);
      }
    }
  } catch (const Error& e) {
    close(c, e.what(), true);
    return;
  }
  if (!c.closed) keep_unparsed(c, view, held);
}

void Conns::keep_unparsed(Conn& c, std::string_view rest, bool held) {
  if (held) {
    c.in_off = c.in.size() - rest.size();
    drop_consumed(c.in, c.in_off, kInSlack);
  } else if (!rest.empty()) {
    c.in.assign(rest);
    c.in_off = 0;
  }
}

void Conns::flush(Conn& c) {
  while (c.unsent() > 0) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.out_off, c.unsent(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      close(c, std::strerror(errno), false);
      return;
    }
    c.out_off += static_cast<std::size_t>(n);
  }
  drop_consumed(c.out, c.out_off, kOutSlack);
  const bool was_out = c.want_out;
  const bool was_paused = c.paused;
  c.want_out = c.unsent() > 0;
  if (c.paused && c.unsent() <= opts_.max_unsent / 2) c.paused = false;
  if (was_out != c.want_out || was_paused != c.paused) set_interest(c);
  // Resumed: serve what was read before the pause.
  if (was_paused && !c.paused && c.in_off < c.in.size()) process(c, {});
}

void Conns::set_interest(Conn& c) {
  loop_.want(c, (c.paused ? 0u : kReadable) | (c.want_out ? kWritable : 0u));
}

void Conns::close(Conn& c, const std::string& reason, bool error) {
  if (c.closed) return;
  c.closed = true;
  dispatch_.on_close(c);
  loop_.unwatch(c);
  if (error) {
    ++n_dropped_;
    log_limited(fmt::format("{}: closed the connection of {}: {}", opts_.who,
                            sockaddr_text(reinterpret_cast<const sockaddr*>(&c.peer)), reason));
    ::close(c.fd);
  } else {
    close_reset(c.fd);  // nothing of ours is owed to a peer that went away
  }
  const auto it = conns_.find(c.serial);
  if (it != conns_.end()) {
    loop_.retire(std::move(it->second));
    conns_.erase(it);
  }
  n_conns_ = conns_.size();
}

void Conns::close_all(const std::string& reason) {
  while (!conns_.empty()) close(*conns_.begin()->second, reason, false);
}

std::size_t Conns::buffered_bytes() const {
  std::size_t n = 0;
  for (const auto& [serial, c] : conns_) n += c->in.size() + c->out.size();
  return n;
}

// ---- log ----

void Conns::log(const std::string& line) const {
  if (opts_.log) {
    opts_.log(line);
  } else {
    std::fprintf(stderr, "ddprun: %s\n", line.c_str());
  }
}

void Conns::log_limited(const std::string& line) {
  if (!limiter_.allow(auth::LogLimiter::Clock::now())) return;
  if (const auto skipped = limiter_.take_suppressed()) {
    log(fmt::format("{}: {} more such line(s) not shown", opts_.who, skipped));
  }
  log(line);
}

}  // namespace ddprun::store::c10d
