#include "launcher/system.hpp"

#include <fmt/format.h>

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <utility>

#include "agent/io.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "store/sockaddr.hpp"

extern char** environ;

namespace ddprun::launcher {

namespace {

// Binds 0.0.0.0:port (SO_REUSEADDR, as PyTorch's store does) and returns the bound port, or 0.
std::uint16_t try_bind(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  sa.sin_port = htons(port);
  std::uint16_t bound = 0;
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) == 0) {
    socklen_t len = sizeof sa;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0) bound = ntohs(sa.sin_port);
  }
  ::close(fd);
  return bound;
}

}  // namespace

bool port_is_free(std::uint16_t port) {
  return port != 0 && try_bind(port) == port;
}

std::optional<PortHold> PortHold::take(std::uint16_t port) {
  PortHold h;
  h.port_ = port;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    h.port_ = 0;
    return h;
  }
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  // Abstract namespace: sun_path starts with a NUL byte; the name's length is part of the address.
  const std::string name = fmt::format("ddprun/master-port/{}", port);
  std::memcpy(sa.sun_path + 1, name.data(), name.size());
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&sa), len) == 0) {
    h.fd_ = fd;
    return h;
  }
  const int err = errno;
  ::close(fd);
  if (err == EADDRINUSE) return std::nullopt;
  h.port_ = 0;
  return h;
}

PortHold::PortHold(PortHold&& o) noexcept : fd_(std::exchange(o.fd_, -1)), port_(std::exchange(o.port_, 0)) {}

PortHold& PortHold::operator=(PortHold&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    port_ = std::exchange(o.port_, 0);
  }
  return *this;
}

PortHold::~PortHold() {
  if (fd_ >= 0) ::close(fd_);
}

std::pair<int, int> ephemeral_port_range() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  int high = 0;
  if (in >> low >> high && low > 0 && low <= high && high <= 65535) return {low, high};
  return {32768, 60999};  // Linux's default
}

std::vector<std::uint16_t> master_port_fallbacks(int planned, std::uint16_t avoid, int ephemeral_low) {
  std::vector<std::uint16_t> out;
  const int start = planned > 0 && planned < ephemeral_low ? planned + 1 : core::kDefaultMasterPort + 1;
  for (int p = start, tries = 0; p < ephemeral_low && p <= 65535 && tries < 256; ++p, ++tries) {
    if (p != avoid) out.push_back(static_cast<std::uint16_t>(p));
  }
  return out;
}

MasterPort choose_master_port(int planned, std::uint16_t avoid, bool given, PortHold held) {
  // Claim first, then check by binding: the claim decides between two ddprun jobs, the bind check
  // catches every other program.
  const auto claim = [&](std::uint16_t p) -> std::optional<MasterPort> {
    std::optional<PortHold> hold;
    if (held.port() == p) {
      hold = std::move(held);
    } else {
      hold = PortHold::take(p);
    }
    if (!hold || !port_is_free(p)) return std::nullopt;
    return MasterPort{p, std::move(*hold)};
  };
  if (planned > 0 && planned <= 65535 && planned != avoid) {
    if (auto m = claim(static_cast<std::uint16_t>(planned))) return std::move(*m);
  }
  if (given && planned > 0 && planned <= 65535) {
    throw core::Error(
        fmt::format("--master-port {} is already in use on this node; free it, give another port, or drop "
                    "--master-port (and DDPRUN_MASTER_PORT) to let ddprun pick a free one",
                    planned),
        1);
  }
  // Below the ephemeral range first: the kernel gives those ports to no outgoing connection, so the port
  // stays free until worker rank 0 binds it, seconds later; an ephemeral one can be taken meanwhile by any
  // connect() on the machine (seen in CI: "Address already in use" at the worker's bind).
  for (const std::uint16_t p : master_port_fallbacks(planned, avoid, ephemeral_port_range().first)) {
    if (auto m = claim(p)) return std::move(*m);
  }
  for (int i = 0; i < 100; ++i) {
    const std::uint16_t p = try_bind(0);
    if (p == 0 || p == avoid) continue;
    if (auto m = claim(p)) return std::move(*m);
  }
  throw core::Error("cannot find a free TCP port for MASTER_PORT on this node", 1);
}

core::EnvSnapshot snapshot_environ() {
  core::EnvSnapshot env;
  for (char** p = environ; p != nullptr && *p != nullptr; ++p) {
    std::string kv(*p);
    auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

core::SystemInfo probe_system() {
  core::SystemInfo s;
  s.hostname = agent::local_hostname();
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    s.cpu_count = CPU_COUNT(&set);
  } else {
    s.cpu_count = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  }
  // /dev/nvidiaN exist on GPU nodes even without nvidia-smi; the last resort when nothing else says.
  std::error_code ec;
  std::vector<int> ids;
  for (const auto& entry : std::filesystem::directory_iterator("/dev", ec)) {
    const std::string name = entry.path().filename().string();
    constexpr std::string_view kPrefix = "nvidia";
    if (name.size() <= kPrefix.size() || name.compare(0, kPrefix.size(), kPrefix) != 0) continue;
    const std::string num = name.substr(kPrefix.size());
    if (num.find_first_not_of("0123456789") != std::string::npos || num.size() > 4) continue;
    ids.push_back(std::stoi(num));
  }
  std::sort(ids.begin(), ids.end());
  for (int id : ids) s.probed_gpus.push_back(std::to_string(id));
  return s;
}

std::vector<core::IfaceEntry> list_interfaces() {
  std::vector<core::IfaceEntry> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;  // then "its interfaces: none"
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_name == nullptr) continue;
    core::IfaceEntry e;
    e.name = i->ifa_name;
    e.up = (i->ifa_flags & IFF_UP) != 0;
    const int fam = i->ifa_addr != nullptr ? i->ifa_addr->sa_family : AF_UNSPEC;
    if (fam == AF_INET || fam == AF_INET6) {
      sockaddr_storage ss{};
      std::memcpy(&ss, i->ifa_addr, fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
      e.family = fam == AF_INET ? core::IfaceEntry::Family::v4 : core::IfaceEntry::Family::v6;
      e.address = store::numeric_host_of(ss);
      const auto scope = e.address.find('%');  // a link-local address's scope is not part of it
      if (scope != std::string::npos) e.address.resize(scope);
    }
    out.push_back(std::move(e));
  }
  ::freeifaddrs(list);
  return out;
}

void apply_rdzv_iface(core::Resolved& r) {
  if (!r.rdzv_iface || r.context == core::SlurmContext::batch) return;
  core::set_local_addr(
      r, core::choose_iface_address(*r.rdzv_iface, list_interfaces(), r.self.host.value_or("localhost")));
}

}  // namespace ddprun::launcher
