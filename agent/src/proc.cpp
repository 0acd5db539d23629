#include "proc.hpp"

#include <sys/wait.h>
#include <cerrno>
#include <csignal>
#include <utility>

#include "agent/spawn.hpp"

namespace ddprun::agent {

namespace asio = boost::asio;

namespace {
constexpr std::size_t kReadChunk = 16 * 1024;
}  // namespace

Proc::Proc(asio::io_context& io, std::size_t index, const core::Worker& w, std::string host)
    : index_(index), w_(&w), host_(std::move(host)), exit_fd_(io), out_(io), err_(io) {}

Proc::~Proc() {
  if (pid_ > 0 && !end.exited) ::killpg(pid_, SIGKILL);
  reap();
}

void Proc::reap() {
  if (pid_ <= 0 || reaped_) return;
  int st = 0;
  while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
}

void Proc::start(const ResolvedCommand& cmd, const std::vector<std::string>& env,
                 const std::function<void(pid_t)>& forked) {
  SpawnRequest req;
  req.program = cmd.program;
  req.argv = cmd.argv;
  req.env = env;
  req.forked = forked;
  req.cpus = w_->cpus;
  Spawned s = spawn_process(req);
  pid_ = s.pid;
  start_ = std::chrono::steady_clock::now();
  exit_fd_.assign(s.exit_fd.release());
  out_.sd.assign(s.stdout_fd.release());
  err_.sd.assign(s.stderr_fd.release());
  for (Pipe* p : {&out_, &err_}) {
    p->buf = std::make_unique<char[]>(kReadChunk);
    p->open = true;
  }
}

void Proc::watch(ProcListener& l) {
  listener_ = &l;
  arm_exit();
  arm_read(false);
  arm_read(true);
}

void Proc::signal_group(int sig) const {
  ::killpg(pid_, sig);
}

void Proc::signal(int sig) const {
  if (signal_target(sig) == SignalTarget::process) {
    ::kill(pid_, sig);
  } else {
    signal_group(sig);
  }
}

void Proc::kill_and_reap() {
  ::killpg(pid_, SIGKILL);
  int st = 0;
  while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
  record_exit(decode_wait_status(st));
  end.stopped_by_ddprun = true;
}

void Proc::stop_reading() {
  for (Pipe* p : {&out_, &err_}) {
    if (p->open) p->sd.cancel();
  }
}

WorkerExit Proc::exit_record() const {
  WorkerExit e;
  e.rank = w_->rank;
  e.local_rank = w_->local_rank;
  e.node_rank = w_->node_rank;
  e.host = host_;
  e.pid = pid_;
  e.status = end.status;
  e.stopped_by_ddprun = end.stopped_by_ddprun;
  e.reason = exit_reason(end.status, end.stopped_by_ddprun);
  e.end_time = end.time;
  e.duration = end.duration;
  return e;
}

void Proc::arm_exit() {
  exit_fd_.async_wait(asio::posix::descriptor_base::wait_read, [this](const boost::system::error_code& ec) {
    if (ec) return;
    // WNOWAIT: read the status but leave the zombie (see reaped_).
    siginfo_t info{};
    const int r = ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT);
    if ((r == 0 && info.si_pid == 0) || (r < 0 && errno == EINTR)) {
      arm_exit();  // spurious wake-up
      return;
    }
    // Someone else reaped it (SIGCHLD ignored by the embedding program): the status is lost.
    reaped_ = r < 0;
    record_exit(r == 0 ? decode_child_status(info.si_code, info.si_status) : ExitStatus{1, 0});
    listener_->on_exit(*this);
  });
}

void Proc::record_exit(const ExitStatus& status) {
  end.exited = true;
  end.ended = std::chrono::steady_clock::now();
  end.duration = std::chrono::duration_cast<std::chrono::milliseconds>(end.ended - start_);
  end.time = core::failure_now();
  end.status = status;
  boost::system::error_code ignored;
  exit_fd_.close(ignored);
}

void Proc::arm_read(bool is_err) {
  Pipe& pp = pipe(is_err);
  pp.sd.async_read_some(asio::buffer(pp.buf.get(), kReadChunk),
                        [this, is_err](const boost::system::error_code& ec, std::size_t n) {
                          Pipe& p = pipe(is_err);
                          if (n > 0) {
                            p.split.feed(std::string_view(p.buf.get(), n), [&](std::string_view line) {
                              listener_->on_line(*this, is_err, line);
                            });
                            listener_->on_read(*this, is_err, p.split.open_line());
                          }
                          if (ec) {
                            close_pipe(is_err);
                          } else {
                            arm_read(is_err);
                          }
                        });
}

void Proc::close_pipe(bool is_err) {
  Pipe& p = pipe(is_err);
  if (!p.open) return;
  p.split.finish([&](std::string_view line) { listener_->on_line(*this, is_err, line); });
  p.open = false;
  boost::system::error_code ignored;
  p.sd.close(ignored);
  listener_->on_eof(*this, is_err);
}

}  // namespace ddprun::agent
