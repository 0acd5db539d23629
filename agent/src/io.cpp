#include "agent/io.hpp"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <system_error>

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

std::string absolute_path(const std::string& path) {
  if (path.empty()) return path;
  std::error_code ec;
  const std::string abs = std::filesystem::absolute(path, ec).string();
  if (ec) return path;
  // "." and empty components go; ".." stays (a symbolic link before it decides where it leads).
  std::string out;
  std::size_t from = 0;
  while (from <= abs.size()) {
    const std::size_t to = std::min(abs.find('/', from), abs.size());
    const std::string_view part(abs.data() + from, to - from);
    if (!part.empty() && part != ".") {
      out += '/';
      out += part;
    }
    from = to + 1;
  }
  return out.empty() ? "/" : out;
}

std::string local_hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

}  // namespace ddprun::agent
