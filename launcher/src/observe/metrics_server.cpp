#include "launcher/observe/metrics_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/metrics.hpp"

namespace ddprun::launcher {

namespace {

using Clock = std::chrono::steady_clock;

struct Client {
  int fd = -1;
  std::string in;
  std::string out;
  std::size_t sent = 0;
  bool answered = false;
  Clock::time_point deadline;
};

}  // namespace

MetricsServer::MetricsServer(const std::string& host, std::uint16_t port, Source source)
    : source_(std::move(source)) {
  const auto fail = [&](const std::string& why) {
    return core::Error(
        fmt::format("--metrics-port {}: cannot serve metrics there ({}); choose a free port "
                    "(DDPRUN_METRICS_PORT) or leave the option out",
                    port, why));
  };
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) throw fail(std::strerror(errno));
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  if (!host.empty() && ::inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1) {
    ::close(listen_fd_);
    throw fail("not an IPv4 address: " + host);
  }
  if (::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0 ||
      ::listen(listen_fd_, 64) != 0) {
    const std::string why = errno == EADDRINUSE ? "the port is in use" : std::strerror(errno);
    ::close(listen_fd_);
    throw fail(why);
  }
  socklen_t len = sizeof sa;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len);
  port_ = ntohs(sa.sin_port);
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    ::close(listen_fd_);
    throw fail(std::strerror(errno));
  }
  thread_ = std::thread([this] { run(); });
}

MetricsServer::~MetricsServer() {
  if (thread_.joinable()) {
    const char c = 'x';
    (void)!::write(wake_[1], &c, 1);
    thread_.join();
  }
  for (const int fd : {listen_fd_, wake_[0], wake_[1]}) {
    if (fd >= 0) ::close(fd);
  }
}

std::string MetricsServer::answer(const std::string& head) {
  const core::HttpVerdict v = core::classify_http_request(head);
  if (v.status != 200) {
    const std::string body = v.status == 404   ? "not found: ddprun serves GET /metrics\n"
                             : v.status == 405 ? "method not allowed: use GET /metrics\n"
                                               : "bad request: send GET /metrics HTTP/1.1\n";
    return core::http_response(v.status, "text/plain; charset=utf-8", body, v.head_only);
  }
  try {
    return core::http_response(200, core::kMetricsContentType, core::format_metrics(source_()), v.head_only);
  } catch (const std::exception& e) {
    return core::http_response(503, "text/plain; charset=utf-8", fmt::format("no status: {}\n", e.what()),
                               v.head_only);
  }
}

void MetricsServer::run() {
  std::vector<Client> clients;
  for (;;) {
    std::vector<pollfd> fds;
    fds.push_back({wake_[0], POLLIN, 0});
    // At the limit the listener is not polled: new clients wait in its queue.
    const bool accepting = clients.size() < static_cast<std::size_t>(kMaxConnections);
    fds.push_back({listen_fd_, static_cast<short>(accepting ? POLLIN : 0), 0});
    for (const auto& c : clients) fds.push_back({c.fd, static_cast<short>(c.answered ? POLLOUT : POLLIN), 0});
    const int n = ::poll(fds.data(), fds.size(), 250);
    if (n < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) {
      for (auto& c : clients) ::close(c.fd);
      return;
    }
    const auto now = Clock::now();
    for (std::size_t i = 0; i < clients.size(); ++i) {
      Client& c = clients[i];
      const short re = fds[i + 2].revents;
      bool done = false;
      if (!c.answered && (re & (POLLIN | POLLHUP | POLLERR))) {
        char buf[2048];
        const ssize_t got = ::recv(c.fd, buf, sizeof buf, 0);
        if (got > 0) {
          c.in.append(buf, static_cast<std::size_t>(got));
          const auto scan = core::scan_request_head(c.in, kMaxHead);
          if (scan.state != core::HeadScan::State::more) {
            // An oversized head is answered 400 like any other bad request.
            c.out = answer(scan.state == core::HeadScan::State::complete ? std::string(scan.head)
                                                                         : std::string());
            c.answered = true;
          }
        } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
          done = true;  // the client left before asking
        }
      } else if (c.answered && (re & (POLLOUT | POLLHUP | POLLERR))) {
        const ssize_t put = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
        if (put > 0) c.sent += static_cast<std::size_t>(put);
        if ((put < 0 && errno != EAGAIN && errno != EINTR) || c.sent == c.out.size()) done = true;
      }
      if (done || now > c.deadline) {
        ::close(c.fd);
        c.fd = -1;
      }
    }
    std::erase_if(clients, [](const Client& c) { return c.fd < 0; });
    if (accepting && (fds[1].revents & POLLIN)) {
      while (clients.size() < static_cast<std::size_t>(kMaxConnections)) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        clients.push_back({fd, {}, {}, 0, false, Clock::now() + kClientTimeout});
      }
    }
  }
}

}  // namespace ddprun::launcher
