#include "agent/io.hpp"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace ddprun::agent {

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t w = ::write(fd, data.data(), data.size());
    if (w > 0) {
      data.remove_prefix(static_cast<std::size_t>(w));
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else if (w < 0 && errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 1000);
    } else {
      return false;
    }
  }
  return true;
}

std::string local_hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

}  // namespace ddprun::agent
