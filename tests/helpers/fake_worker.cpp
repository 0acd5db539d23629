// A worker for agent tests. Its behaviour is a list of actions run left to right, taken from argv
// and then from the FAKE_WORKER_ACTIONS environment variable (space separated), so each rank of
// one command line can behave differently. Standard C++ and POSIX only.
//
//   exit N            exit with code N
//   signal N          reset signal N to default and raise it
//   hang              wait forever (signals still act)
//   sleep MS          sleep MS milliseconds
//   ignore-term       ignore SIGTERM
//   trap N FILE       on signal N append "N\n" to FILE and keep going
//   trap-term FILE    on SIGTERM write "TERM\n" to FILE and exit 0
//   exit-on N MS CODE on signal N sleep MS milliseconds (a checkpoint being written), then exit CODE
//   lines N WHERE     print N lines "line I" fast to out, err or both
//   partial TEXT      print TEXT to stdout without a newline
//   write TEXT        write TEXT to stdout as it is, after \r, \n, \\ and \xNN escapes; ewrite: to stderr
//   bar N MS          a progress bar on stderr: "\rbar I/N" for I = 1..N, MS milliseconds apart, no newline
//   dots N MS         N dots on stdout, MS milliseconds apart, no newline
//   print TEXT        print TEXT and a newline to stdout;  eprint TEXT: the same to stderr
//   env NAME          print "NAME=value" or "NAME unset"
//   fds               print "fds: 0 1 2 ..." (descriptors open in this process)
//   pgid              print "pgid P pid Q"
//   sigstate          print the SigBlk and SigIgn lines of /proc/self/status
//   pid FILE          write this process's pid to FILE (atomically)
//   touch FILE        create FILE
//   wait-file FILE    wait until FILE exists
//   fork-hang FILE    start a child (same process group, same stdout) that writes its pid to FILE
//                     and waits forever; this process goes on
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

const char* g_trap_file[65] = {};
std::vector<std::string> g_trap_storage(65);

extern "C" void on_trap(int sig) {
  const char* path = g_trap_file[sig];
  if (path == nullptr) return;
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd >= 0) {
    char buf[8];
    int n = 0;
    if (sig >= 10) buf[n++] = static_cast<char>('0' + sig / 10);
    buf[n++] = static_cast<char>('0' + sig % 10);
    buf[n++] = '\n';
    [[maybe_unused]] const ssize_t w = ::write(fd, buf, static_cast<size_t>(n));
    ::close(fd);
  }
}

extern "C" void on_trap_term(int) {
  const char* path = g_trap_file[SIGTERM];
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    [[maybe_unused]] const ssize_t w = ::write(fd, "TERM\n", 5);
    ::close(fd);
  }
  ::_exit(0);
}

int g_exit_on_ms = 0;
int g_exit_on_code = 0;

extern "C" void on_exit_signal(int) {
  timespec ts{g_exit_on_ms / 1000, (g_exit_on_ms % 1000) * 1000000L};
  while (::nanosleep(&ts, &ts) != 0) {
  }
  ::_exit(g_exit_on_code);
}

void install(int sig, void (*handler)(int)) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(sig, &sa, nullptr);
}

void sleep_ms(long ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  while (::nanosleep(&ts, &ts) != 0) {
  }
}

// TEXT with \r, \n, \\ and \xNN replaced by the bytes they name.
std::string unescape(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\' || i + 1 >= text.size()) {
      out += text[i];
    } else if (text[i + 1] == 'x' && i + 3 < text.size()) {
      out += static_cast<char>(std::stoi(text.substr(i + 2, 2), nullptr, 16));
      i += 3;
    } else {
      const char c = text[++i];
      out += c == 'r' ? '\r' : c == 'n' ? '\n' : c;
    }
  }
  return out;
}

void write_now(std::FILE* f, const std::string& bytes) {
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fflush(f);
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

[[noreturn]] void usage(const std::string& what) {
  std::fprintf(stderr, "fake_worker: %s\n", what.c_str());
  std::exit(100);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> actions(argv + 1, argv + argc);
  if (const char* extra = std::getenv("FAKE_WORKER_ACTIONS")) {
    std::istringstream in(extra);
    for (std::string a; in >> a;) actions.push_back(a);
  }
  static char outbuf[1 << 16];
  static char errbuf[1 << 16];
  std::setvbuf(stdout, outbuf, _IOFBF, sizeof outbuf);
  std::setvbuf(stderr, errbuf, _IOFBF, sizeof errbuf);

  std::size_t i = 0;
  auto arg = [&](const char* name) -> std::string {
    if (i >= actions.size()) usage(std::string("missing argument for ") + name);
    return actions[i++];
  };
  auto num = [&](const char* name) { return std::atol(arg(name).c_str()); };

  while (i < actions.size()) {
    const std::string a = actions[i++];
    if (a == "exit") {
      const int code = static_cast<int>(num("exit"));
      std::fflush(nullptr);
      std::exit(code);
    } else if (a == "signal") {
      const int sig = static_cast<int>(num("signal"));
      std::fflush(nullptr);
      std::signal(sig, SIG_DFL);
      std::raise(sig);
    } else if (a == "hang") {
      std::fflush(nullptr);
      for (;;) ::pause();
    } else if (a == "sleep") {
      std::fflush(nullptr);
      ::usleep(static_cast<useconds_t>(num("sleep") * 1000));
    } else if (a == "ignore-term") {
      std::signal(SIGTERM, SIG_IGN);
    } else if (a == "trap") {
      const int sig = static_cast<int>(num("trap"));
      if (sig <= 0 || sig > 64) usage("bad signal for trap");
      g_trap_storage[static_cast<std::size_t>(sig)] = arg("trap");
      g_trap_file[sig] = g_trap_storage[static_cast<std::size_t>(sig)].c_str();
      install(sig, on_trap);
    } else if (a == "trap-term") {
      g_trap_storage[SIGTERM] = arg("trap-term");
      g_trap_file[SIGTERM] = g_trap_storage[SIGTERM].c_str();
      install(SIGTERM, on_trap_term);
    } else if (a == "exit-on") {
      const int sig = static_cast<int>(num("exit-on"));
      g_exit_on_ms = static_cast<int>(num("exit-on"));
      g_exit_on_code = static_cast<int>(num("exit-on"));
      install(sig, on_exit_signal);
    } else if (a == "lines") {
      const long n = num("lines");
      const std::string where = arg("lines");
      const bool out = where == "out" || where == "both";
      const bool err = where == "err" || where == "both";
      if (!out && !err) usage("lines: WHERE must be out, err or both");
      for (long k = 0; k < n; ++k) {
        if (out) std::fprintf(stdout, "line %ld\n", k);
        if (err) std::fprintf(stderr, "line %ld\n", k);
      }
      std::fflush(nullptr);
    } else if (a == "partial") {
      std::fputs(arg("partial").c_str(), stdout);
      std::fflush(stdout);
    } else if (a == "write" || a == "ewrite") {
      write_now(a == "write" ? stdout : stderr, unescape(arg("write")));
    } else if (a == "bar") {
      const long n = num("bar");
      const long ms = num("bar");
      for (long k = 1; k <= n; ++k) {
        write_now(stderr, "\rbar " + std::to_string(k) + "/" + std::to_string(n));
        sleep_ms(ms);
      }
    } else if (a == "dots") {
      const long n = num("dots");
      const long ms = num("dots");
      for (long k = 0; k < n; ++k) {
        write_now(stdout, ".");
        sleep_ms(ms);
      }
    } else if (a == "print" || a == "eprint") {
      std::FILE* f = a == "print" ? stdout : stderr;
      std::fprintf(f, "%s\n", arg("print").c_str());
      std::fflush(f);
    } else if (a == "env") {
      const std::string name = arg("env");
      const char* v = std::getenv(name.c_str());
      if (v != nullptr) {
        std::printf("%s=%s\n", name.c_str(), v);
      } else {
        std::printf("%s unset\n", name.c_str());
      }
      std::fflush(stdout);
    } else if (a == "fds") {
      std::string list;
      if (DIR* d = ::opendir("/proc/self/fd")) {
        const int own = ::dirfd(d);
        std::vector<int> fds;
        while (const dirent* e = ::readdir(d)) {
          if (e->d_name[0] == '.') continue;
          const int fd = std::atoi(e->d_name);
          if (fd != own) fds.push_back(fd);
        }
        ::closedir(d);
        std::sort(fds.begin(), fds.end());
        for (int fd : fds) list += " " + std::to_string(fd);
      }
      std::printf("fds:%s\n", list.c_str());
      std::fflush(stdout);
    } else if (a == "pgid") {
      std::printf("pgid %d pid %d\n", static_cast<int>(::getpgrp()), static_cast<int>(::getpid()));
      std::fflush(stdout);
    } else if (a == "sigstate") {
      std::ifstream status("/proc/self/status");
      for (std::string line; std::getline(status, line);) {
        if (line.rfind("SigBlk:", 0) == 0 || line.rfind("SigIgn:", 0) == 0) std::printf("%s\n", line.c_str());
      }
      std::fflush(stdout);
    } else if (a == "pid") {
      const std::string path = arg("pid");
      const std::string tmp = path + ".tmp";
      {
        std::ofstream f(tmp);
        f << ::getpid() << "\n";
      }
      std::rename(tmp.c_str(), path.c_str());
    } else if (a == "touch") {
      std::ofstream f(arg("touch"));
    } else if (a == "fork-hang") {
      const std::string path = arg("fork-hang");
      std::fflush(nullptr);
      const pid_t child = ::fork();
      if (child == 0) {
        const std::string tmp = path + ".tmp";
        {
          std::ofstream f(tmp);
          f << ::getpid() << "\n";
        }
        std::rename(tmp.c_str(), path.c_str());
        for (;;) ::pause();
      }
      while (!exists(path)) ::usleep(5000);
    } else if (a == "wait-file") {
      const std::string path = arg("wait-file");
      while (!exists(path)) ::usleep(5000);
    } else {
      usage("unknown action '" + a + "'");
    }
  }
  std::fflush(nullptr);
  return 0;
}
