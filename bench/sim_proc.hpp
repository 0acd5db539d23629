#pragma once
// The master process as bench/rdzv_scale sees it from outside: /proc figures, its port, its end.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <fmt/core.h>
#include <boost/asio.hpp>

namespace sim::proc {

namespace asio = boost::asio;
using asio::ip::tcp;

// /proc/<pid>/stat: utime + stime in seconds.
inline double proc_cpu_s(pid_t pid) {
  std::ifstream f(fmt::format("/proc/{}/stat", pid));
  std::string s((std::istreambuf_iterator<char>(f)), {});
  const auto rp = s.rfind(')');
  if (rp == std::string::npos) return 0;
  std::istringstream in(s.substr(rp + 2));
  std::string tok;
  unsigned long long ut = 0, st = 0;
  for (int field = 3; in >> tok; ++field) {
    if (field == 14) ut = std::stoull(tok);
    if (field == 15) {
      st = std::stoull(tok);
      break;
    }
  }
  return static_cast<double>(ut + st) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

inline long proc_status_kb(pid_t pid, const char* field) {
  std::ifstream f(fmt::format("/proc/{}/status", pid));
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(field, 0) == 0) return std::atol(line.c_str() + std::strlen(field) + 1);
  }
  return 0;
}

// Free on every address, as the master listens on 0.0.0.0: a port free on 127.0.0.1 only may be the
// source port of a simulated agent's connection from another loopback address (of this run or of
// another simulator on the machine), and the master's bind would fail.
inline std::uint16_t free_port() {
  asio::io_context io;
  tcp::acceptor a(io, tcp::endpoint(asio::ip::address_v4::any(), 0));
  return a.local_endpoint().port();
}

inline bool wait_listening(std::uint16_t port, pid_t master) {
  asio::io_context io;
  for (int i = 0; i < 2000; ++i) {
    tcp::socket s(io);
    boost::system::error_code ec;
    s.connect(tcp::endpoint(asio::ip::address_v4::loopback(), port), ec);
    if (!ec) return true;
    if (::waitpid(master, nullptr, WNOHANG) == master) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// The master has exited (a zombie until reaped, or gone).
inline bool master_exited(pid_t pid) {
  std::ifstream f(fmt::format("/proc/{}/stat", pid));
  std::string s((std::istreambuf_iterator<char>(f)), {});
  const auto rp = s.rfind(')');
  return rp == std::string::npos || rp + 2 >= s.size() || s[rp + 2] == 'Z';
}

}  // namespace sim::proc
