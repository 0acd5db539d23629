#include "agent/supervisor.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <utility>

#include "agent/command.hpp"
#include "agent/error.hpp"
#include "agent/events.hpp"
#include "agent/io.hpp"
#include "agent/log_relay.hpp"
#include "agent/report.hpp"
#include "agent/signals.hpp"
#include "agent/spawn.hpp"

namespace ddprun::agent {

namespace asio = boost::asio;
using Steady = std::chrono::steady_clock;

void validate_options(const AgentOptions& opts) {
  build_argv(CommandSpec{opts.command, opts.no_python, opts.module, opts.python});
  if (opts.prefix_template) render_prefix(*opts.prefix_template, PrefixFields{});
  if (opts.tee && !opts.log_dir) {
    throw Error("--tee writes per-rank files and needs --log-dir DIR to know where");
  }
  if (opts.term_timeout.count() < 0) throw Error("--term-timeout must not be negative");
  if (opts.attempt < 0) throw Error("attempt number must not be negative");
}

std::string attempt_dir(const std::string& log_dir, int attempt) {
  return fmt::format("{}/attempt_{}", log_dir, attempt);
}

std::string rank_log_dir(const std::string& log_dir, int attempt, int rank) {
  return fmt::format("{}/rank_{}", attempt_dir(log_dir, attempt), rank);
}

std::string error_json_path(const AgentOptions& opts, int node_rank) {
  if (opts.error_file) return *opts.error_file;
  if (opts.log_dir)
    return fmt::format("{}/error_node_{}.json", attempt_dir(*opts.log_dir, opts.attempt), node_rank);
  return "";
}

namespace {

constexpr std::size_t kReadChunk = 16 * 1024;
// A failed worker's last stderr lines usually arrive right after its exit; wait this long at most
// before reporting it, so the root cause carries them.
constexpr std::chrono::milliseconds kStderrWait{200};
// After every worker ended, output still held by escaped grandchildren is read this long at most.
constexpr std::chrono::milliseconds kDrainTimeout{2000};

void write_stderr(const std::string& text) {
  write_all(2, text);
}

nlohmann::json signal_json(int sig) {
  return sig != 0 ? nlohmann::json(signal_name(sig)) : nlohmann::json(nullptr);
}

double seconds(std::chrono::milliseconds d) {
  return static_cast<double>(d.count()) / 1000.0;
}

// A worker's end in one line; a failure caused by our own teardown says so.
std::string exit_reason(const ExitStatus& s, bool after_teardown) {
  if (after_teardown && s.signal != 0) return fmt::format("{} (stopped by ddprun)", describe_exit(s));
  if (after_teardown && s.failed()) return fmt::format("{} during teardown", describe_exit(s));
  return describe_exit(s);
}

nlohmann::json summary_json(const RunResult& r) {
  nlohmann::json workers = nlohmann::json::array();
  for (const auto& e : r.exits) {
    workers.push_back({{"rank", e.rank},
                       {"local_rank", e.local_rank},
                       {"host", e.host},
                       {"exit", e.status.exit_code},
                       {"signal", signal_json(e.status.signal)},
                       {"duration_s", seconds(e.duration)},
                       {"stopped_by_ddprun", e.stopped_by_ddprun}});
  }
  return {{"success", r.success}, {"exit_code", r.exit_code}, {"attempt", r.attempt}, {"workers", workers}};
}

bool same_failure(const Failure& a, const Failure& b) {
  return a.host == b.host && a.rank == b.rank && a.pid == b.pid && a.node_rank == b.node_rank;
}

// A worker that could not be started; run() turns it into a result.
struct StartFailure {
  std::string message;
  int exit_code;
  std::size_t worker;  // index into the local workers
};

struct Stream {
  explicit Stream(asio::io_context& io, bool err) : sd(io), is_err(err) {}
  asio::posix::stream_descriptor sd;
  LineSplitter split;
  std::unique_ptr<char[]> buf;
  bool open = false;
  bool is_err;
};

struct Proc {
  explicit Proc(asio::io_context& io) : pidfd(io), out(io, false), err(io, true), fail_timer(io) {}
  const core::Worker* w = nullptr;
  std::string host;
  pid_t pid = -1;
  asio::posix::stream_descriptor pidfd;
  Stream out;
  Stream err;
  std::string prefix;
  bool console = true;
  LineWriter out_file;
  LineWriter err_file;
  TailBuffer tail{20};
  core::FailureTime end_time{};
  Steady::time_point start{};
  Steady::time_point end{};
  bool exited = false;
  ExitStatus status;
  bool after_teardown = false;
  bool failure_pending = false;
  asio::steady_timer fail_timer;
};

class Supervisor {
 public:
  Supervisor(const std::vector<core::Worker>& local, int world_size, const AgentOptions& opts,
             Coordinator& coord)
      : local_(local),
        world_size_(world_size),
        opts_(opts),
        coord_(coord),
        kill_timer_(io_),
        drain_timer_(io_),
        sig_sd_(io_),
        out_console_(1),
        err_console_(2),
        json_(opts.events != nullptr && opts.events->json()) {}

  ~Supervisor() {
    // Only reached with live workers if something threw: never leave them behind.
    for (auto& p : procs_) {
      if (p->pid > 0 && !p->exited) {
        ::killpg(p->pid, SIGKILL);
        int st = 0;
        while (::waitpid(p->pid, &st, 0) < 0 && errno == EINTR) {
        }
      }
    }
  }

  RunResult run();

 private:
  Failure worker_failure(const Proc& p) const;
  RunResult start_failure(const std::string& msg, int code, const core::Worker& w);
  void spawn_all();
  void arm_exit(Proc& p);
  void on_exited(Proc& p, int wait_status, bool reaped);
  void arm_read(Proc& p, Stream& s);
  void emit(Proc& p, bool is_err, std::string_view line);
  void flush(Proc& p, bool is_err);
  void close_stream(Proc& p, Stream& s);
  void arm_signal();
  void on_signal(int sig);
  void on_remote(const Failure& f);
  void handle_local_failure();
  void offer_local_root(const Failure& f);
  void publish(const Failure& f);
  void start_teardown(int sig, const char* reason, const Failure& root);
  void event(const std::string& name, nlohmann::json fields) const;
  void warn(const std::string& message) const;
  void worker_exited_event(const Proc& p) const;
  void kill_all(int sig, bool live_only);
  void check_done();
  void deliver_posted();
  std::optional<Failure> remote() const;
  bool succeeded() const;
  void wait_exit_barrier(SignalWatcher& sigw);
  RunResult finish();
  void write_error_json(const RunResult& r) const;

  const std::vector<core::Worker>& local_;
  int world_size_;
  const AgentOptions& opts_;
  Coordinator& coord_;
  asio::io_context io_;  // declared before everything that uses it
  asio::steady_timer kill_timer_;
  asio::steady_timer drain_timer_;
  asio::posix::stream_descriptor sig_sd_;
  unsigned char sig_buf_[64] = {};
  LineWriter out_console_;
  LineWriter err_console_;
  bool json_;  // events instead of ddprun's own text on stderr
  std::vector<std::string> argv_;
  std::vector<std::unique_ptr<Proc>> procs_;
  std::string host_;
  int node_rank_ = 0;
  bool teardown_started_ = false;
  bool cleanup_started_ = false;
  bool running_ = false;  // the loop runs; after it, signals wait for finish() and nothing is torn down
  std::vector<int> late_signals_;
  int agent_signal_ = 0;
  std::optional<Failure> local_root_;
  std::optional<Failure> remote_root_;  // the one place it is kept: delivered by asio::post
};

// Installs the remote abort handler for one run. Every remote root cause reaches the loop through
// asio::post; the coordinator stops calling the handler once it is reset.
class AbortHandler {
 public:
  AbortHandler(Coordinator& c, std::function<void(const Failure&)> h) : c_(c) {
    c_.set_remote_abort_handler(std::move(h));
  }
  ~AbortHandler() { reset(); }
  AbortHandler(const AbortHandler&) = delete;
  AbortHandler& operator=(const AbortHandler&) = delete;
  void reset() {
    if (std::exchange(installed_, false)) c_.set_remote_abort_handler({});
  }

 private:
  Coordinator& c_;
  bool installed_ = true;
};

Failure Supervisor::worker_failure(const Proc& p) const {
  Failure f;
  f.host = p.host;
  f.node_rank = p.w->node_rank;
  f.rank = p.w->rank;
  f.local_rank = p.w->local_rank;
  f.exit_code = p.status.exit_code;
  f.signal = p.status.signal;
  f.pid = p.pid;
  f.reason = describe_exit(p.status);
  f.time = p.end_time;
  const auto t = p.tail.lines();
  f.stderr_tail.assign(t.begin(), t.end());
  return f;
}

RunResult Supervisor::run() {
  validate_options(opts_);
  host_ = local_.empty() ? local_hostname() : local_.front().host.value_or(local_hostname());
  node_rank_ = local_.empty() ? 0 : local_.front().node_rank;
  if (opts_.events != nullptr) opts_.events->set_context(host_, node_rank_);

  AbortHandler abort_handler(coord_,
                             [this](const Failure& f) { asio::post(io_, [this, f] { on_remote(f); }); });
  SignalWatcher sigw(forwarded_signals());
  sig_sd_.assign(::fcntl(sigw.fd(), F_DUPFD_CLOEXEC, 3));

  try {
    spawn_all();
  } catch (const StartFailure& fail) {
    return start_failure(fail.message, fail.exit_code, local_.at(fail.worker));
  }

  if (!procs_.empty()) {
    for (auto& p : procs_) {
      arm_exit(*p);
      arm_read(*p, p->out);
      arm_read(*p, p->err);
    }
    arm_signal();
    running_ = true;
    io_.run();
    running_ = false;
  }
  deliver_posted();
  if (succeeded()) wait_exit_barrier(sigw);
  abort_handler.reset();
  deliver_posted();  // nothing can be posted any more
  return finish();
}

// Runs what was posted after the loop stopped (remote aborts; signals read then wait in late_signals_).
void Supervisor::deliver_posted() {
  io_.restart();
  io_.poll();
}

void Supervisor::spawn_all() {
  if (local_.empty()) return;
  const CommandSpec spec{opts_.command, opts_.no_python, opts_.module, opts_.python};
  ResolvedCommand cmd;
  try {
    const auto& wenv = local_.front().env;
    const auto it = wenv.find("PATH");
    const char* agent_path = std::getenv("PATH");
    const std::string path = it != wenv.end()        ? it->second
                             : agent_path != nullptr ? std::string(agent_path)
                                                     : std::string("/usr/local/bin:/usr/bin:/bin");
    cmd = resolve_command(spec, path);
  } catch (const Error& e) {
    throw StartFailure{e.what(), e.exit_code(), 0};
  }
  argv_ = cmd.argv;
  const bool prefix_on = !opts_.no_prefix && (opts_.prefix_template.has_value() || world_size_ > 1);
  const std::string tmpl = opts_.prefix_template.value_or(std::string(kDefaultPrefixTemplate));
  const auto base_env = current_environment();

  for (std::size_t i = 0; i < local_.size(); ++i) {
    const auto& w = local_[i];
    auto p = std::make_unique<Proc>(io_);
    p->w = &w;
    p->host = w.host.value_or(host_);
    if (prefix_on) {
      const auto role = w.env.find("ROLE_NAME");
      p->prefix = render_prefix(tmpl, PrefixFields{w.rank, w.local_rank, w.node_rank, p->host,
                                                   role != w.env.end() ? role->second : "default"});
    }
    p->console = !opts_.local_ranks_filter || opts_.local_ranks_filter->count(w.local_rank) > 0;
    if (opts_.log_dir) {
      const std::string dir = rank_log_dir(*opts_.log_dir, opts_.attempt, w.rank);
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      if (ec) throw StartFailure{"cannot create log directory " + dir + ": " + ec.message(), 1, i};
      for (const char* name : {"stdout.log", "stderr.log"}) {
        const std::string path = dir + "/" + name;
        const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) throw StartFailure{"cannot open log file " + path + ": " + std::strerror(errno), 1, i};
        (std::strcmp(name, "stdout.log") == 0 ? p->out_file : p->err_file) = LineWriter(fd, true);
      }
    }
    Spawned s;
    try {
      s = spawn_process(SpawnRequest{cmd.program, cmd.argv, merge_environment(base_env, w.env)});
    } catch (const Error& e) {
      throw StartFailure{e.what(), e.exit_code(), i};
    }
    p->pid = s.pid;
    p->start = Steady::now();
    p->pidfd.assign(s.pidfd.release());
    p->out.sd.assign(s.stdout_fd.release());
    p->err.sd.assign(s.stderr_fd.release());
    for (Stream* st : {&p->out, &p->err}) {
      st->buf = std::make_unique<char[]>(kReadChunk);
      st->open = true;
    }
    event("worker_started",
          {{"rank", w.rank}, {"local_rank", w.local_rank}, {"pid", p->pid}, {"argv", argv_}});
    procs_.push_back(std::move(p));
  }
}

RunResult Supervisor::start_failure(const std::string& msg, int code, const core::Worker& w) {
  // Workers already started must not run without their peers.
  for (auto& p : procs_) {
    ::killpg(p->pid, SIGKILL);
    int st = 0;
    while (::waitpid(p->pid, &st, 0) < 0 && errno == EINTR) {
    }
    p->exited = true;
    p->end = Steady::now();
    p->end_time = core::failure_now();
    p->status = decode_wait_status(st);
    p->after_teardown = true;
  }
  std::string command;
  for (const auto& a : opts_.command) command += (command.empty() ? "" : " ") + a;
  Failure f;
  f.host = w.host.value_or(host_);
  f.node_rank = w.node_rank;
  f.rank = w.rank;
  f.local_rank = w.local_rank;
  f.exit_code = code;
  f.reason = "cannot start: " + msg;
  f.fatal = true;  // every node stops: a new attempt would fail the same way
  f.time = core::failure_now();
  if (json_) {
    event("spawn_failed", {{"rank", w.rank},
                           {"local_rank", w.local_rank},
                           {"error", msg},
                           {"exit_code", code},
                           {"command", opts_.command},
                           {"module", opts_.module}});
    for (const auto& p : procs_) worker_exited_event(*p);
  } else {
    write_stderr(fmt::format("ddprun: {} cannot start rank {} (local rank {}) on {}: {} (command: {}{})\n",
                             paint("error:", Style::bold_red, use_colour(2)), w.rank, w.local_rank, f.host,
                             msg, opts_.module ? "-m " : "", command));
  }
  publish(f);
  RunResult r;
  r.exit_code = code;
  r.success = false;
  r.root_cause = f;
  r.spawn_failed = true;
  r.attempt = opts_.attempt;
  r.node_rank = node_rank_;
  r.host = host_;
  if (json_) {
    event("failure_report", report_to_json(r));
    event("summary", summary_json(r));
  }
  write_error_json(r);
  return r;
}

void Supervisor::arm_exit(Proc& p) {
  p.pidfd.async_wait(asio::posix::descriptor_base::wait_read,
                     [this, &p](const boost::system::error_code& ec) {
                       if (ec) return;
                       int st = 0;
                       const pid_t r = ::waitpid(p.pid, &st, WNOHANG);
                       if (r == 0) {
                         arm_exit(p);  // spurious wake-up
                       } else if (r < 0 && errno == EINTR) {
                         arm_exit(p);
                       } else {
                         on_exited(p, st, r == p.pid);
                       }
                     });
}

// The one place a worker's end is recorded.
void Supervisor::on_exited(Proc& p, int wait_status, bool reaped) {
  p.exited = true;
  p.end = Steady::now();
  p.end_time = core::failure_now();
  // Someone else reaped it (SIGCHLD ignored by the embedding program): the status is lost.
  p.status = reaped ? decode_wait_status(wait_status) : ExitStatus{1, 0};
  p.after_teardown = teardown_started_;
  p.pidfd.close();
  worker_exited_event(p);
  if (p.status.failed() && !teardown_started_) {
    p.failure_pending = true;
    if (!p.err.open) {
      handle_local_failure();
    } else {
      p.fail_timer.expires_after(kStderrWait);
      p.fail_timer.async_wait([this](const boost::system::error_code& ec) {
        if (ec) return;
        handle_local_failure();
        check_done();
      });
    }
  }
  check_done();
}

void Supervisor::arm_read(Proc& p, Stream& s) {
  s.sd.async_read_some(asio::buffer(s.buf.get(), kReadChunk),
                       [this, &p, &s](const boost::system::error_code& ec, std::size_t n) {
                         if (n > 0) {
                           s.split.feed(std::string_view(s.buf.get(), n),
                                        [&](std::string_view line) { emit(p, s.is_err, line); });
                           flush(p, s.is_err);
                         }
                         if (ec) {
                           close_stream(p, s);
                         } else {
                           arm_read(p, s);
                         }
                       });
}

void Supervisor::emit(Proc& p, bool is_err, std::string_view line) {
  if (p.console) (is_err ? err_console_ : out_console_).line(p.prefix, line);
  (is_err ? p.err_file : p.out_file).line({}, line);
  if (is_err) p.tail.push(line);
}

void Supervisor::flush(Proc& p, bool is_err) {
  (is_err ? err_console_ : out_console_).flush();
  (is_err ? p.err_file : p.out_file).flush();
}

void Supervisor::close_stream(Proc& p, Stream& s) {
  if (!s.open) return;
  s.split.finish([&](std::string_view line) { emit(p, s.is_err, line); });
  flush(p, s.is_err);
  s.open = false;
  boost::system::error_code ignored;
  s.sd.close(ignored);
  if (s.is_err && p.failure_pending) handle_local_failure();
  check_done();
}

void Supervisor::arm_signal() {
  sig_sd_.async_read_some(asio::buffer(sig_buf_), [this](const boost::system::error_code& ec, std::size_t n) {
    if (ec) return;
    for (std::size_t i = 0; i < n; ++i) {
      if (running_) {
        on_signal(sig_buf_[i]);
      } else {
        late_signals_.push_back(sig_buf_[i]);
      }
    }
    arm_signal();
  });
}

void Supervisor::on_signal(int sig) {
  const SignalAction action = signal_action(sig, agent_signal_, teardown_started_);
  if (is_stopping_signal(sig) && agent_signal_ == 0) agent_signal_ = sig;
  event("signal_received", {{"signal", signal_name(sig)}, {"action", to_string(action)}});
  switch (action) {
    case SignalAction::forward:
      kill_all(sig, true);
      return;
    case SignalAction::kill:
      kill_all(SIGKILL, false);
      return;
    case SignalAction::ignore:
      return;
    case SignalAction::teardown:
      break;
  }
  Failure f;
  f.host = host_;
  f.node_rank = node_rank_;
  f.exit_code = 128 + sig;
  f.signal = sig;  // with rank -1: the agent was stopped, so nobody should restart
  f.pid = ::getpid();
  f.reason = fmt::format("ddprun on {} received {}", host_, signal_name(sig));
  f.time = core::failure_now();
  offer_local_root(f);
  start_teardown(sig, "signal", f);
  publish(f);
}

void Supervisor::on_remote(const Failure& f) {
  if (local_root_ && same_failure(*local_root_, f)) return;  // our own failure, echoed back
  if (!remote_root_) {
    remote_root_ = f;
    event("remote_abort", {{"root_cause", failure_to_json(f)}});
  }
  if (running_ && !teardown_started_) start_teardown(SIGTERM, "remote_abort", f);
}

void Supervisor::handle_local_failure() {
  Proc* first = nullptr;
  for (auto& p : procs_) {
    if (p->failure_pending && (first == nullptr || p->end_time < first->end_time)) first = p.get();
  }
  if (first == nullptr) return;
  for (auto& p : procs_) {
    if (p->failure_pending) {
      p->failure_pending = false;
      p->fail_timer.cancel();
    }
  }
  const Failure f = worker_failure(*first);
  offer_local_root(f);
  if (!teardown_started_) {
    start_teardown(SIGTERM, "worker_failed", f);
    publish(f);
  }
}

void Supervisor::offer_local_root(const Failure& f) {
  if (!local_root_ || f.time < local_root_->time) local_root_ = f;
}

void Supervisor::publish(const Failure& f) {
  try {
    coord_.publish_failure(f);
  } catch (const std::exception& e) {
    warn(fmt::format("could not tell the other nodes about the failure: {}", e.what()));
  }
}

void Supervisor::event(const std::string& name, nlohmann::json fields) const {
  if (json_) opts_.events->emit(name, std::move(fields));
}

void Supervisor::warn(const std::string& message) const {
  if (json_) {
    event("warning", {{"message", message}});
  } else {
    write_stderr("ddprun: " + paint("warning:", Style::yellow, use_colour(2)) + " " + message + "\n");
  }
}

void Supervisor::worker_exited_event(const Proc& p) const {
  if (!json_) return;
  event("worker_exited",
        {{"rank", p.w->rank},
         {"local_rank", p.w->local_rank},
         {"pid", p.pid},
         {"exit_code", p.status.exit_code},
         {"signal", signal_json(p.status.signal)},
         {"reason", exit_reason(p.status, p.after_teardown)},
         {"duration_s", seconds(std::chrono::duration_cast<std::chrono::milliseconds>(p.end - p.start))},
         {"stopped_by_ddprun", p.after_teardown}});
}

void Supervisor::start_teardown(int sig, const char* reason, const Failure& root) {
  if (teardown_started_) return;
  teardown_started_ = true;
  event("teardown", {{"reason", reason},
                     {"signal", signal_name(sig)},
                     {"grace_s", seconds(opts_.term_timeout)},
                     {"root_cause", failure_to_json(root)}});
  kill_all(sig, true);
  kill_timer_.expires_after(opts_.term_timeout);
  kill_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) kill_all(SIGKILL, false);
  });
}

void Supervisor::kill_all(int sig, bool live_only) {
  for (auto& p : procs_) {
    // The group outlives its leader while children remain; ESRCH just means it is gone.
    if (!live_only || !p->exited) ::killpg(p->pid, sig);
  }
}

void Supervisor::check_done() {
  for (auto& p : procs_) {
    if (!p->exited) return;
  }
  if (!cleanup_started_) {
    cleanup_started_ = true;
    kill_timer_.cancel();
    kill_all(SIGKILL, false);  // whatever the workers left behind in their groups
    drain_timer_.expires_after(kDrainTimeout);
    drain_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      for (auto& p : procs_) {
        for (Stream* s : {&p->out, &p->err}) {
          if (s->open) s->sd.cancel();  // held open by a process outside the groups
        }
      }
    });
  }
  for (auto& p : procs_) {
    if (p->out.open || p->err.open || p->failure_pending) return;
  }
  io_.stop();
}

std::optional<Failure> Supervisor::remote() const {
  if (remote_root_ && local_root_ && same_failure(*remote_root_, *local_root_)) return std::nullopt;
  return remote_root_;
}

bool Supervisor::succeeded() const {
  bool ok = !local_root_ && !remote() && agent_signal_ == 0;
  for (const auto& p : procs_) ok = ok && !p->status.failed();
  return ok;
}

// This node's workers all succeeded: wait for the other nodes.
void Supervisor::wait_exit_barrier(SignalWatcher& sigw) {
  bool barrier = false;
  try {
    barrier = coord_.exit_barrier(opts_.exit_barrier_timeout);
  } catch (const std::exception& e) {
    warn(fmt::format("exit barrier failed: {}", e.what()));
  }
  deliver_posted();  // an abort that ended the barrier
  if (!barrier && !remote()) {
    warn(fmt::format("not every node finished within the exit barrier ({} s); this node's workers succeeded",
                     opts_.exit_barrier_timeout.count() / 1000));
  }
  const auto unread = sigw.drain();
  late_signals_.insert(late_signals_.end(), unread.begin(), unread.end());
  for (int sig : late_signals_) {
    if (is_stopping_signal(sig) && agent_signal_ == 0) {
      agent_signal_ = sig;
      // The workers had already ended: nothing to forward, but the job counts as stopped.
      event("signal_received", {{"signal", signal_name(sig)}, {"action", "stop"}});
    }
  }
}

RunResult Supervisor::finish() {
  RunResult r;
  r.attempt = opts_.attempt;
  r.node_rank = node_rank_;
  r.host = host_;
  std::vector<ExitStatus> statuses;
  for (auto& p : procs_) {
    WorkerExit e;
    e.rank = p->w->rank;
    e.local_rank = p->w->local_rank;
    e.node_rank = p->w->node_rank;
    e.host = p->host;
    e.pid = p->pid;
    e.status = p->status;
    e.stopped_by_ddprun = p->after_teardown;
    e.reason = exit_reason(p->status, p->after_teardown);
    e.end_time = p->end_time;
    e.duration = std::chrono::duration_cast<std::chrono::milliseconds>(p->end - p->start);
    const auto t = p->tail.lines();
    e.stderr_tail.assign(t.begin(), t.end());
    statuses.push_back(p->status);
    // The report's root cause gets every stderr line, including those read after it was published.
    if (local_root_ && local_root_->rank == e.rank && local_root_->pid == e.pid) {
      local_root_->stderr_tail = e.stderr_tail;
    }
    r.exits.push_back(std::move(e));
  }

  const auto remote_root = remote();
  r.root_cause = choose_root_cause(local_root_, remote_root);
  r.remote_abort = remote_root.has_value() && r.root_cause && same_failure(*r.root_cause, *remote_root);
  r.stopped_by_signal = agent_signal_ != 0;
  r.signal = agent_signal_;
  r.exit_code = job_exit_code(r.root_cause, agent_signal_, statuses);
  r.success = r.exit_code == 0 && !r.root_cause && agent_signal_ == 0;

  if (json_) {
    if (!r.success) event("failure_report", report_to_json(r));
    event("summary", summary_json(r));
  } else {
    // --quiet hides the tables, never the failure.
    const bool colour = use_colour(2);
    std::string text;
    if (!r.success) text += format_report(r, colour, opts_.quiet ? ReportLength::brief : ReportLength::full);
    if (!opts_.quiet && !r.exits.empty()) text += format_summary(r, colour);
    write_stderr(text);
  }
  if (!r.success) write_error_json(r);
  return r;
}

void Supervisor::write_error_json(const RunResult& r) const {
  const std::string path = error_json_path(opts_, node_rank_);
  if (path.empty()) return;
  std::error_code ec;
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  std::ofstream f(path, std::ios::trunc);
  // Worker stderr lines may not be UTF-8: replace them rather than throw.
  f << report_to_json(r).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  f.close();
  if (!f) warn("cannot write the error report to " + path);
}

}  // namespace

RunResult run_workers(const std::vector<core::Worker>& local, int world_size, const AgentOptions& opts,
                      Coordinator& coordinator) {
  Supervisor s(local, world_size, opts, coordinator);
  return s.run();
}

}  // namespace ddprun::agent
