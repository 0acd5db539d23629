#include "agent/supervisor.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>
#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <csignal>
#include <cstdlib>
#include <memory>
#include <optional>
#include <utility>

#include "agent/command.hpp"
#include "agent/error.hpp"
#include "agent/io.hpp"
#include "agent/python_error.hpp"
#include "agent/signals.hpp"
#include "agent/spawn.hpp"
#include "supervisor_impl.hpp"

namespace ddprun::agent {

namespace detail {

RunResult Supervisor::run() {
  host_ = local_.empty() ? local_hostname() : local_.front().host.value_or(local_hostname());
  node_rank_ = local_.empty() ? 0 : local_.front().node_rank;
  reporter_.set_node(host_, node_rank_);

  ScopedAbortHandler abort_handler(coord_, [this](const Failure& f, bool from_store) {
    asio::post(io_, [this, f, from_store] { on_remote_abort(f, from_store); });
  });
  SignalWatcher sigw(forwarded_signals());
  sig_sd_.assign(::fcntl(sigw.fd(), F_DUPFD_CLOEXEC, 3));
  sig_sd_.non_blocking(true);  // take_pending_signals reads it directly
  std::string no_error_files;  // said once the workers started: a start error stays one line
  if (!local_.empty()) {
    reaper_.start();
    error_files_ = open_error_files(opts_.log_dir, opts_.requeue, attempt_.attempt,
                                    [&no_error_files](const std::string& m) { no_error_files = m; });
  }
  if (const auto failed = spawn_all()) return start_failure(*failed);
  if (attempt_.on_started) attempt_.on_started();
  if (!no_error_files.empty()) reporter_.warn(no_error_files);

  if (!procs_.empty()) {
    for (auto& p : procs_) p->watch(*this);
    arm_signal();
    running_ = true;
    if (coord_.observed()) {  // else nobody could read a record or ask for stacks
      status_.serve_stacks(stacks_files_, workers_path_);
      status_.start([this] { return status_snapshot(); }, [this] { return hang_.heartbeat_files(); });
    }
    io_.run();
    running_ = false;
    // The final states go out before the exit barrier holds the store connection; `ddprun stacks` is
    // still answered (ranks ended) while this node waits there.
    status_.workers_ended();
  }
  failures_.join();  // bounded; its answer was handled on the loop, or is posted
  deliver_posted();
  if (succeeded()) wait_exit_barrier(sigw);
  status_.stop();
  abort_handler.reset();
  deliver_posted();  // nothing can be posted any more
  RunResult r = finish();
  // A stop read after the loop and counted by nobody (the run had failed before it) goes to the hold:
  // it cancels a restart (docs/agent.md, Signals). One still unread goes there with the watcher.
  for (const int s : late_signals_) {
    if (is_stopping_signal(s)) keep_stop_signal(s);
  }
  return r;
}

std::optional<StartFailure> Supervisor::spawn_all() {
  if (local_.empty()) return std::nullopt;
  const CommandSpec spec = command_spec(opts_);
  ResolvedCommand cmd;
  try {
    const auto& wenv = local_.front().env;
    const auto it = wenv.find("PATH");
    const char* agent_path = std::getenv("PATH");
    const std::string path = it != wenv.end()        ? it->second
                             : agent_path != nullptr ? std::string(agent_path)
                                                     : std::string("/usr/local/bin:/usr/bin:/bin");
    cmd = resolve_command(spec, path);
    hang_.prepare(spec, path);
    workers_path_ = path;
  } catch (const Error& e) {
    return StartFailure{e.what(), start_exit_code(e.exit_code()), 0};
  }
  const auto base_env = current_environment();
  for (std::size_t i = 0; i < local_.size(); ++i) {
    const auto& w = local_[i];
    auto p = std::make_unique<Proc>(io_, i, w, w.host.value_or(host_));
    try {
      relay_.add(w, p->host());
      cmd.argv = worker_argv(spec, w.local_rank);
      auto env = hang_.worker_env(w, base_env);
      env = stack_hook_.env(std::move(env), base_env, w.rank);
      stacks_files_.push_back(stack_hook_.file(w.rank));
      if (error_files_) env["TORCHELASTIC_ERROR_FILE"] = p->error_file = error_files_->prepare(w.rank);
      // Made by now: the reaper removes them if this agent is killed.
      for (const std::string& dir : {error_files_ ? error_files_->private_dir() : std::string(),
                                     hang_.private_dir(), stack_hook_.private_dir()}) {
        reaper_.remove_on_death(dir);
      }
      p->start(cmd, merge_environment(base_env, env), [this](pid_t pgid) { reaper_.watch(pgid); });
      hang_.started(i, w.rank, env);
    } catch (const Error& e) {
      return StartFailure{e.what(), start_exit_code(e.exit_code()), i};
    }
    procs_.push_back(std::move(p));
    status_.started(i);
    on_spawned(*procs_.back(), cmd.argv);
  }
  return std::nullopt;
}

RunResult Supervisor::start_failure(const StartFailure& s) {
  // Workers already started must not run without their peers.
  for (auto& p : procs_) p->kill_and_reap();
  const Failure f = start_failed(local_.at(s.worker), host_, s.message, s.exit_code);
  reporter_.spawn_failed(f, s.message, procs_);
  failures_.offer_local_now(f);
  deliver_posted();  // another node's abort, if one came
  RunResult r = base_result();
  const auto outcome = failures_.outcome({});
  r.root_cause = outcome.root_cause;
  r.remote_abort = outcome.remote_abort;
  r.not_told = outcome.not_told;
  r.exit_code = job_exit_code(r.root_cause, 0, {});
  r.success = false;
  r.spawn_failed = true;
  reporter_.finished(r);
  return r;
}

void Supervisor::on_spawned(Proc& p, const std::vector<std::string>& argv) {
  reporter_.worker_started(p, argv);
}

void Supervisor::on_line(Proc& p, bool is_err, std::string_view line) {
  relay_.line(p.index(), is_err, line);
  hang_.line(p.index(), is_err, line);
  status_.line(p.index(), line);
}

// Any output is progress, a line or not (a progress bar redraws without a newline).
void Supervisor::on_read(Proc& p, bool is_err, std::string_view open_line) {
  relay_.flush(p.index(), is_err);
  relay_.open_line(p.index(), is_err, open_line);
  hang_.output(p.index());
  status_.output(p.index(), open_line);
}

void Supervisor::on_eof(Proc& p, bool is_err) {
  relay_.flush(p.index(), is_err);
  if (is_err) failures_.stderr_closed(p);
  check_done();
}

// The one place a worker's end is recorded.
void Supervisor::on_exit(Proc& p) {
  // srun signals the agent and every worker at once: a signal already here is taken before the
  // exit it may have caused (the two wake the loop together, in either order), so a worker ending
  // on a checkpoint signal is "stopped after" it, not this node's failure.
  take_pending_signals();
  hang_.exited(p.index());
  // Once a hang is declared, an end is ours: our SIGABRT, or a peer's abort reaching a rank that
  // waited for the hung one. The hang stays the root cause.
  p.end.stopped_by_ddprun = teardown_.started() || hang_.declared();
  p.end.after_signal = teardown_.started() ? 0 : grace_.signal();
  reporter_.worker_exited(p);
  if (p.end.status.failed() && !p.end.stopped_by_ddprun) failures_.worker_failed(p);
  check_done();
}

// Teardown at once, or once the grace after a checkpoint signal is over; the other nodes learn of
// it at once either way (the tracker publishes this node's first failure).
void Supervisor::on_local_failure(const Failure& f) {
  on_request_ = on_request_ || f.after_signal != 0;
  if (!teardown_.started()) {
    grace_.after_failure(f.after_signal != 0, [this, f] { start_teardown(SIGTERM, "worker_failed", f); });
  }
  check_done();
}

// This node's ranks made no progress: tell the other nodes at once (they gather their own stacks),
// then collect ours and tear down.
void Supervisor::on_hang(const std::vector<HungRank>& hung) {
  failures_.settle();  // a worker that failed by itself is this node's failure, not the silence
  if (teardown_.started() || hang_.declared() || failures_.any()) return;
  for (const auto& h : hung) hung_workers_.push_back(h.worker);
  const Failure f = hang_failure(hung, *procs_.at(hung.front().worker), hang_.timeout());
  failures_.offer_local(f);  // and published
  relay_.interrupt_terminal();
  reporter_.hang_detected(f, hang_.timeout());
  collect_stacks(hung, "hang", f);
}

void Supervisor::collect_stacks(const std::vector<HungRank>& hung, const char* reason, const Failure& root) {
  grace_.cancel();
  hang_.collect(hung, stacks_files_, [this, reason, root] {
    start_teardown(SIGTERM, reason, root);
    check_done();
  });
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

void Supervisor::take_pending_signals() {
  if (!running_) return;
  unsigned char buf[64];
  ssize_t n = 0;
  while ((n = ::read(sig_sd_.native_handle(), buf, sizeof buf)) > 0) {
    for (ssize_t i = 0; i < n; ++i) on_signal(buf[i]);
  }
}

// Workers that failed just before this checkpoint signal reached the agent ended on it (Slurm signals
// them first); their failures wait for the settle, so they are still undecided.
void Supervisor::claim_late_exits(int sig) {
  const auto now = std::chrono::steady_clock::now();
  bool claimed = false;
  for (const auto& p : procs_) {
    if (p->end.exited && p->end.status.failed() && p->end.after_signal == 0 && !p->end.stopped_by_ddprun &&
        ended_on_late_signal(p->end.ended, now, opts_.signal_settle)) {
      p->end.after_signal = sig;
      claimed = true;
    }
  }
  if (claimed) failures_.settle();  // nothing left to wait for
}

void Supervisor::on_signal(int sig) {
  const SignalAction action = signal_action(sig, agent_signal_, teardown_.started());
  if (is_stopping_signal(sig) && agent_signal_ == 0) agent_signal_ = sig;
  reporter_.signal_received(sig, to_string(action));
  switch (action) {
    case SignalAction::forward:
      teardown_.signal_live(sig);
      if (is_checkpoint_signal(sig) && !teardown_.started()) {
        grace_.forwarded(sig);
        claim_late_exits(sig);
      }
      return;
    case SignalAction::kill:
      teardown_.kill_all();
      return;
    case SignalAction::ignore:
      return;
    case SignalAction::teardown:
      break;
  }
  // A worker that failed before the signal came stays this node's first failure.
  failures_.settle();
  const Failure f = agent_stopped(sig, host_, node_rank_);
  start_teardown(sig, "signal", f);
  failures_.offer_local(f);  // kept and published only when nothing failed here before
  check_done();              // ends the wait for the rest of a checkpoint grace
}

void Supervisor::on_remote_abort(const Failure& f, bool from_store) {
  if (failures_.is_echo(f)) {  // our own failure, echoed back: the job's root cause is ours
    failures_.record_remote(f, from_store);
    return;
  }
  if (failures_.record_remote(f, from_store)) reporter_.remote_abort(f);
  on_request_ = on_request_ || f.after_signal != 0;
  if (hang_.declared()) return;  // the teardown follows the stacks
  if (f.hang && hang_.enabled() && running_ && !teardown_.started()) {
    // Another node's ranks hung: ours that are not printing probably wait for them; their stacks too.
    collect_stacks(hang_.silent_now(), "remote_abort", f);
    return;
  }
  if (running_) {
    grace_.after_failure(f.after_signal != 0, [this, f] { start_teardown(SIGTERM, "remote_abort", f); });
  }
}

void Supervisor::start_teardown(int sig, const char* reason, const Failure& root) {
  if (teardown_.started()) return;
  grace_.cancel();
  hang_.stop();
  reporter_.teardown(reason, sig, root);
  teardown_.start(sig);
}

void Supervisor::check_done() {
  for (const auto& p : procs_) {
    if (!p->end.exited) return;
  }
  on_all_exited();
}

// Every worker exited: the loop stops once their output is read and no failure waits for it.
void Supervisor::on_all_exited() {
  grace_.cancel();
  hang_.stop();
  relay_.stop();
  teardown_.all_exited();
  for (const auto& p : procs_) {
    if (p->reading(false) || p->reading(true)) return;
  }
  if (failures_.waiting() || hang_.collecting()) return;
  // After a stop on request the other nodes may still be writing their checkpoints; leaving now
  // would let srun --kill-on-bad-exit TERM them. So stay for the rest of this node's grace.
  if (on_request_ && has_peers_ && agent_signal_ == 0) {
    grace_.when_over([this] { io_.stop(); });
  } else {
    io_.stop();
  }
}

// Runs what was posted after the loop stopped (remote aborts; signals read then wait in late_signals_).
void Supervisor::deliver_posted() {
  io_.restart();
  io_.poll();
}

bool Supervisor::succeeded() const {
  bool ok = !failures_.any() && agent_signal_ == 0;
  for (const auto& p : procs_) ok = ok && !p->end.status.failed();
  return ok;
}

// This node's workers all succeeded, but the job has succeeded only once every node got this far:
// wait for that, or for the job's root cause, however long the other nodes run (their liveness bounds
// the wait). A stopping signal meanwhile ends it at once: published as this node's failure (bounded, as
// every publication), it ends every node's barrier with one root cause, so every node reports the same
// outcome; a publication that fails ends this node's wait alone.
void Supervisor::wait_exit_barrier(SignalWatcher& sigw) {
  std::optional<Failure> stopped;  // written by the signal thread, read once it is joined
  // The tracker is touched by the signal thread only while this thread waits in the barrier.
  const auto stop = [this, &stopped](int sig) {
    stopped = agent_stopped(sig, host_, node_rank_);
    failures_.offer_local_now(*stopped);
  };
  int sig = 0;
  for (int s : std::exchange(late_signals_, {})) {
    if (is_stopping_signal(s) && sig == 0) sig = s;  // came after the workers ended, before this wait
  }
  std::string error;
  const auto barrier = [this, &error]() -> BarrierOutcome {
    try {
      return coord_.exit_barrier();
    } catch (const std::exception& e) {
      error = e.what();
      return {};
    }
  };
  BarrierOutcome end;
  if (sig != 0) {
    stop(sig);
    end = barrier();  // ends at once: the abort is in, or could not be published
  } else {
    StopDuringWait during(sig_sd_.native_handle(), stop);
    end = barrier();
    sig = during.finish();
  }
  if (stopped) {
    agent_signal_ = sig;
    reporter_.signal_received(sig, "stop");
  }
  if (!error.empty()) {
    // Not known to have succeeded everywhere: never reported as a success.
    reporter_.warn(fmt::format("exit barrier failed: {}", error));
    Failure f;
    f.host = host_;
    f.node_rank = node_rank_;
    f.exit_code = 1;
    f.reason = fmt::format("the exit barrier failed: {}", error);
    f.time = core::failure_now();
    failures_.offer_local_now(f);
  }
  // The barrier's answer, before any pushed copy of it still on its way to the loop.
  if (end.root) on_remote_abort(*end.root, end.from_store);
  deliver_posted();
  const auto unread = sigw.drain();
  late_signals_.insert(late_signals_.end(), unread.begin(), unread.end());
  for (int s : late_signals_) {
    if (is_stopping_signal(s) && agent_signal_ == 0) {
      agent_signal_ = s;
      // The workers had already ended: nothing to forward, but the job counts as stopped.
      reporter_.signal_received(s, "stop");
    }
  }
  late_signals_.clear();  // counted
}

// What `ddprun top` shows of this node now (the status thread adds RSS and CPU%).
core::NodeStatus Supervisor::status_snapshot() const {
  core::NodeStatus s;
  s.node_rank = node_rank_;
  s.host = host_;
  s.attempt = attempt_.attempt;
  s.world_size = world_size_;
  s.nnodes = attempt_.plan_nodes > 0 ? attempt_.plan_nodes : attempt_.agents;
  s.elastic_events = attempt_.elastic_events;
  bool all_exited = true;
  const auto now = SteadyClock::now();
  const auto secs = [](SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); };
  for (const auto& p : procs_) {
    const std::size_t i = p->index();
    core::RankStatus r;
    r.rank = p->worker().rank;
    r.local_rank = p->worker().local_rank;
    r.pid = p->pid();
    r.restarts = attempt_.attempt;
    r.last_line = status_.last_line(i);
    const auto start = status_.start_time(i);
    const auto output = status_.last_output(i);
    // Progress: an output line, or a heartbeat touch as the hang watch last saw it (--hang-timeout).
    std::optional<SteadyClock::time_point> progress = output;
    if (const auto beat = hang_.last_progress(i); beat && *beat > start) {
      progress = progress ? std::max(*progress, *beat) : *beat;
    }
    const bool hung = std::find(hung_workers_.begin(), hung_workers_.end(), i) != hung_workers_.end();
    r.state = core::rank_state({p->end.exited, p->end.stopped_by_ddprun, hung, progress.has_value()});
    if (p->end.exited) {
      r.exit_code = p->end.status.exit_code;
      r.run_seconds = secs(p->end.duration);
    } else {
      all_exited = false;
      r.run_seconds = secs(now - start);
      r.progress_age = secs(now - progress.value_or(start));
    }
    s.ranks.push_back(std::move(r));
  }
  s.agent_state = core::agent_state_of(all_exited, hang_.collecting(), teardown_.started());
  return s;
}

RunResult Supervisor::base_result() const {
  RunResult r;
  r.attempt = attempt_.attempt;
  r.node_rank = node_rank_;
  r.host = host_;
  return r;
}

std::vector<WorkerExit> Supervisor::exits() const {
  std::vector<WorkerExit> out;
  for (const auto& p : procs_) {
    out.push_back(p->exit_record());
    out.back().stderr_tail = relay_.stderr_tail(p->index());
  }
  return out;
}

RunResult Supervisor::finish() {
  RunResult r = base_result();
  r.exits = exits();
  r.hung = hang_.result();
  std::vector<ExitStatus> statuses;
  for (const auto& e : r.exits) statuses.push_back(e.status);
  const auto outcome = failures_.outcome(r.exits);
  r.root_cause = outcome.root_cause;
  r.remote_abort = outcome.remote_abort;
  r.not_told = outcome.not_told;
  r.stopped_by_signal = agent_signal_ != 0;
  r.signal = agent_signal_;
  r.exit_code = job_exit_code(r.root_cause, agent_signal_, statuses);
  r.success = r.exit_code == 0 && !r.root_cause && agent_signal_ == 0;
  r.no_progress =
      ends_without_progress(r, attempt_.attempt, opts_.max_restarts_without_progress, attempt_.steps);
  reporter_.finished(r);
  return r;
}

}  // namespace detail

RunResult run_workers(const std::vector<core::Worker>& local, int world_size, const AgentOptions& opts,
                      const AttemptContext& attempt, Coordinator& coordinator, Events* events) {
  validate_options(opts);
  if (attempt.attempt < 0) throw Error("attempt number must not be negative");
  detail::Supervisor s(local, world_size, opts, attempt, coordinator, events);
  return s.run();
}

}  // namespace ddprun::agent
