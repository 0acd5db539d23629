#include "reaper.hpp"

#include <fcntl.h>
#include <linux/close_range.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "agent/signals.hpp"

extern char** environ;

namespace ddprun::agent {

namespace {

constexpr char kGroupTag = 'g';
constexpr char kDirTag = 'd';
constexpr char kGoodbyeTag = 'b';
constexpr std::size_t kMaxRecord = 1 + 4096;  // a tag and a path of PATH_MAX
// Process groups the fork fallback records; a node never runs this many workers.
constexpr int kMaxGroups = 4096;
pid_t g_groups[kMaxGroups];  // written only in the fallback reaper, in its own copy of the memory

void close_from(unsigned first) {
  if (::syscall(SYS_close_range, first, ~0U, 0U) == 0) return;
  rlimit rl{};
  const long max_fd =
      ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 65536 ? static_cast<long>(rl.rlim_cur) : 65536L;
  for (long fd = first; fd < max_fd; ++fd) ::close(static_cast<int>(fd));
}

// The reaper's signals, set in the forked child (async-signal-safe): it shares the agent's process
// group and terminal, so Ctrl-C or a TERM to the whole step must not end it before the agent does. The
// end of the socket ends it (or SIGKILL). Ignored signals stay ignored across exec.
void reaper_signals() {
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  struct sigaction dfl = ign;
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    const bool ignore = sig == SIGHUP || sig == SIGINT || sig == SIGQUIT || sig == SIGTERM ||
                        sig == SIGUSR1 || sig == SIGUSR2 || sig == SIGPIPE || sig == SIGALRM ||
                        sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU;
    if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, ignore ? &ign : &dfl, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);  // the agent blocked everything around fork
}

void kill_groups(const pid_t* groups, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) ::kill(-groups[i], SIGKILL);
}

// After exec: the groups are killed, and once they are gone (or after 2 s: a zombie nobody reaps)
// the directories are removed, so that no dying worker writes into one after it went.
[[noreturn]] void reap(const std::vector<pid_t>& groups, const std::vector<std::string>& dirs) {
  kill_groups(groups.data(), groups.size());
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  const auto alive = [&groups] {
    for (const pid_t g : groups) {
      if (::kill(-g, 0) == 0) return true;
    }
    return false;
  };
  while (!dirs.empty() && alive() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (const auto& d : dirs) {
    std::error_code ec;  // best effort: nothing to tell anyone
    std::filesystem::remove_all(d, ec);
  }
  ::_exit(0);
}

// The reaper after exec, on fd 3: a program of its own, single-threaded, free to allocate.
[[noreturn]] void serve(int fd) {
  ::prctl(PR_SET_NAME, kReaperName);
  std::vector<pid_t> groups;
  std::vector<std::string> dirs;
  char buf[kMaxRecord];
  for (;;) {
    const ssize_t r = ::recv(fd, buf, sizeof buf, MSG_TRUNC);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;  // closed without a goodbye: the agent died
    if (static_cast<std::size_t>(r) > sizeof buf) continue;
    const ReaperRecord rec = parse_reaper_record({buf, static_cast<std::size_t>(r)});
    if (rec.kind == ReaperRecord::Kind::goodbye) ::_exit(0);
    if (rec.kind == ReaperRecord::Kind::group) groups.push_back(rec.group);
    if (rec.kind == ReaperRecord::Kind::dir) dirs.emplace_back(rec.dir);
  }
  reap(groups, dirs);
}

// Only if the exec failed: the reaper as the forked child itself, async-signal-safe calls only and
// no allocation (the agent's other threads' locks are frozen here). It kills the groups; the
// directories stay.
[[noreturn]] void serve_in_fork(int fd) {
  ::prctl(PR_SET_NAME, kReaperName);
  int n = 0;
  char buf[kMaxRecord];
  for (;;) {
    const ssize_t r = ::recv(fd, buf, sizeof buf, MSG_TRUNC);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    if (static_cast<std::size_t>(r) > sizeof buf) continue;
    const ReaperRecord rec = parse_reaper_record({buf, static_cast<std::size_t>(r)});
    if (rec.kind == ReaperRecord::Kind::goodbye) ::_exit(0);
    if (rec.kind == ReaperRecord::Kind::group && n < kMaxGroups) g_groups[n++] = rec.group;
  }
  kill_groups(g_groups, static_cast<std::size_t>(n));
  ::_exit(0);
}

// The forked child: async-signal-safe calls only. The socket goes to fd 3, /dev/null to 0-2, and
// every other descriptor closes: the agent's store connections and pipes must close when it dies.
[[noreturn]] void child_main(int sock, int devnull, char* const* argv) {
  reaper_signals();
  const int s = ::fcntl(sock, F_DUPFD, 10);  // out of 0-3 before those are overwritten
  const int n = ::fcntl(devnull, F_DUPFD, 10);
  if (s < 0 || ::dup2(s, 3) < 0) ::_exit(1);
  if (n >= 0) {
    for (int fd = 0; fd <= 2; ++fd) ::dup2(n, fd);
  }
  close_from(4);
  // The agent's environment: the same program finds its libraries as the agent did.
  ::execve("/proc/self/exe", argv, environ);
  serve_in_fork(3);
}

// The entry of the exec'd reaper, before main (glibc passes the program's arguments to ELF
// constructors): only for the argv {"ddprun-reaper"} with the agent's socket on fd 3.
__attribute__((constructor)) void reaper_entry(int argc, char** argv, char** /*envp*/) {
  if (argc != 1 || argv == nullptr || argv[0] == nullptr || std::strcmp(argv[0], kReaperName) != 0) return;
  int type = 0;
  socklen_t len = sizeof type;
  if (::getsockopt(3, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_SEQPACKET) {
    static constexpr char kMsg[] =
        "ddprun-reaper: ddprun's own helper, started by its agent; not a command\n";
    [[maybe_unused]] const ssize_t w = ::write(2, kMsg, sizeof kMsg - 1);
    ::_exit(2);
  }
  serve(3);
}

}  // namespace

std::string reaper_group_record(pid_t pgid) {
  const auto v = static_cast<std::int32_t>(pgid);
  std::string r(1, kGroupTag);
  r.append(reinterpret_cast<const char*>(&v), sizeof v);
  return r;
}

std::string reaper_dir_record(const std::string& dir) {
  return std::string(1, kDirTag) + dir;
}

std::string reaper_goodbye_record() {
  return std::string(1, kGoodbyeTag);
}

bool reaper_may_remove(std::string_view dir) {
  if (dir.size() < 2 || dir.front() != '/' || dir.back() == '/') return false;
  std::size_t start = 1;
  std::string_view last;
  while (start <= dir.size()) {
    const std::size_t slash = dir.find('/', start);
    const std::size_t end = slash == std::string_view::npos ? dir.size() : slash;
    last = dir.substr(start, end - start);
    if (last.empty() || last == "." || last == "..") return false;
    start = end + 1;
  }
  return last.rfind("ddprun-", 0) == 0 && last.size() > 7;
}

ReaperRecord parse_reaper_record(std::string_view m) {
  ReaperRecord r;
  if (m.empty()) return r;
  const std::string_view body = m.substr(1);
  switch (m.front()) {
    case kGroupTag: {
      std::int32_t v = 0;
      if (body.size() != sizeof v) return r;
      std::memcpy(&v, body.data(), sizeof v);
      if (v <= 1) return r;  // never the init process or every process (-1)
      r.kind = ReaperRecord::Kind::group;
      r.group = static_cast<pid_t>(v);
      return r;
    }
    case kDirTag:
      if (body.find('\0') != std::string_view::npos || !reaper_may_remove(body)) return r;
      r.kind = ReaperRecord::Kind::dir;
      r.dir = body;
      return r;
    case kGoodbyeTag:
      if (body.empty()) r.kind = ReaperRecord::Kind::goodbye;
      return r;
    default:
      return r;
  }
}

void Reaper::start() {
  if (pid_ > 0) return;
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return;
  const int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  char name[] = "ddprun-reaper";
  char* const argv[] = {name, nullptr};
  AllSignalsBlocked blocked;  // across fork: the child sets its own dispositions first
  const pid_t pid = ::fork();
  if (pid == 0) child_main(sv[1], devnull, argv);
  blocked.restore();
  ::close(sv[1]);
  if (devnull >= 0) ::close(devnull);
  if (pid < 0) {
    ::close(sv[0]);
    return;
  }
  pid_ = pid;
  fd_.reset(sv[0]);
}

void Reaper::watch(pid_t pgid) const {
  if (!fd_) return;
  const std::string r = reaper_group_record(pgid);
  ::send(fd_.get(), r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

void Reaper::remove_on_death(const std::string& dir) {
  if (!fd_ || dir.empty() || dir.size() + 1 > kMaxRecord || !dirs_.insert(dir).second) return;
  const std::string r = reaper_dir_record(dir);
  ::send(fd_.get(), r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

void Reaper::disarm() {
  if (pid_ <= 0) return;
  const std::string bye = reaper_goodbye_record();
  ::send(fd_.get(), bye.data(), bye.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  fd_.reset();
  int st = 0;
  while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  dirs_.clear();
}

}  // namespace ddprun::agent
