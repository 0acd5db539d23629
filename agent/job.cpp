#include "agent/job.hpp"

#include <csignal>
#include <cstdlib>

#include <chrono>
#include <mutex>
#include <optional>

#include <fmt/format.h>

#include "agent/error.hpp"
#include "agent/events.hpp"
#include "launcher/dry_run.hpp"
#include "launcher/error.hpp"
#include "agent/supervisor.hpp"
#include "rendezvous/error.hpp"
#include "rendezvous/rendezvous.hpp"

namespace ddprun::agent {

namespace {

using std::chrono::milliseconds;

rdzv::AbortInfo to_abort(const Failure& f) {
  rdzv::AbortInfo a;
  a.reason = f.reason;
  a.host = f.host;
  a.node_rank = f.node_rank;
  a.rank = f.rank;
  a.local_rank = f.local_rank;
  a.exit_code = f.exit_code;
  a.signal = f.signal;
  a.pid = f.pid;
  a.time_ms = std::chrono::duration_cast<milliseconds>(f.time.time_since_epoch()).count();
  a.stderr_tail = f.stderr_tail;
  return a;
}

Failure to_failure(const rdzv::AbortInfo& a) {
  Failure f;
  f.reason = a.reason;
  f.host = a.host;
  f.node_rank = a.node_rank;
  f.rank = a.rank;
  f.local_rank = a.local_rank;
  f.exit_code = a.exit_code;
  f.signal = a.signal;
  f.pid = a.pid;
  f.time = std::chrono::system_clock::time_point(milliseconds(a.time_ms));
  f.stderr_tail = a.stderr_tail;
  return f;
}

// The supervisor's view of the other nodes, over the rendezvous store. An abort that arrives
// before the supervisor installs its handler is kept and delivered on installation.
class StoreCoordinator : public Coordinator {
 public:
  explicit StoreCoordinator(rdzv::Rendezvous& rz) : rz_(rz) {}

  void publish_failure(const Failure& f) override { rz_.abort(to_abort(f)); }

  void set_remote_abort_handler(std::function<void(const Failure&)> h) override {
    std::optional<Failure> pending;
    {
      std::lock_guard lock(mu_);
      handler_ = std::move(h);
      if (handler_ && pending_) pending = pending_;
    }
    if (pending) deliver(*pending);
  }

  bool exit_barrier(milliseconds timeout) override { return rz_.barrier("exit", timeout); }

  // Called by the rendezvous watch thread.
  void on_abort(const rdzv::AbortInfo& a) {
    Failure f = to_failure(a);
    {
      std::lock_guard lock(mu_);
      pending_ = f;
      if (!handler_) return;
    }
    deliver(f);
  }

  void reset() {
    std::lock_guard lock(mu_);
    pending_.reset();
  }

 private:
  void deliver(const Failure& f) {
    std::function<void(const Failure&)> h;
    {
      std::lock_guard lock(mu_);
      h = handler_;
    }
    if (h) h(f);
  }

  rdzv::Rendezvous& rz_;
  std::mutex mu_;
  std::function<void(const Failure&)> handler_;
  std::optional<Failure> pending_;
};

AgentOptions agent_options(const launcher::Options& o, const launcher::Resolved& r) {
  AgentOptions a;
  a.command = r.command;
  a.no_python = true;  // r.command already has the interpreter where one is needed
  a.python = o.python;
  a.term_timeout = milliseconds(static_cast<long>(o.term_timeout * 1000.0));
  a.prefix_template = o.prefix;
  a.no_prefix = o.no_prefix;
  a.tee = o.tee;
  a.log_dir = o.log_dir;
  a.local_ranks_filter = r.local_ranks_filter;
  a.error_file = o.error_file;
  a.quiet = o.quiet;
  return a;
}

nlohmann::json plan_event(const launcher::Plan& plan, int attempt) {
  return {{"attempt", attempt},         {"run_id", plan.run_id},           {"world_size", plan.world_size},
          {"nnodes", plan.nnodes},      {"master_addr", plan.master_addr}, {"master_port", plan.master_port},
          {"mode", launcher::to_string(plan.mode)}};
}

// ddprun's own messages outside the supervisor: text, or one JSON event.
void announce(Events& ev, const launcher::Options& o, const launcher::Plan& plan, int attempt, bool table) {
  if (ev.json()) {
    ev.emit("rendezvous_joined", plan_event(plan, attempt));
  } else if (table && !o.quiet) {
    fmt::print(stderr, "{}", launcher::render_startup_table(plan, attempt));
  }
}

void restarting(Events& ev, int attempt, int code, int max_restarts) {
  if (ev.json()) {
    ev.emit("restart", {{"failed_attempt", attempt}, {"exit_code", code}, {"max_restarts", max_restarts}});
  } else {
    fmt::print(stderr, "ddprun: attempt {} failed (exit {}); restarting ({} of {})\n", attempt, code, attempt + 1,
               max_restarts);
  }
}

int finished(Events& ev, int code) {
  if (ev.json()) ev.emit("job_finished", {{"exit_code", code}, {"success", code == 0}});
  return code;
}

// Once the outcome is decided, only the bounded store drain remains. A TERM now (e.g. srun's
// --kill-on-bad-exit cancelling the step because another node already exited with the root cause)
// must not replace the root cause's exit code with 143.
void finishing() {
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT}) std::signal(sig, SIG_IGN);
}

// A root cause that came from an agent stopped by a signal (scancel, time limit) ends the job:
// restarting would only fight Slurm.
bool stopped_job(const Failure& root) { return root.rank < 0 && root.signal != 0; }

int run_standalone(const launcher::Options& o, const launcher::Resolved& r, Events& ev) {
  AgentOptions ao = agent_options(o, r);
  ao.events = &ev;
  validate_options(ao);
  const int max_restarts = r.job.max_restarts;
  RunResult res;
  for (int attempt = 0;; ++attempt) {
    launcher::JobSpec job = r.job;
    job.restart_count = attempt;
    job.master_port = rdzv::choose_master_port(job.master_port, 0);
    const launcher::Plan plan = launcher::build_plan(job, r.nodes);
    ao.attempt = attempt;
    announce(ev, o, plan, attempt, plan.world_size > 1);
    LocalCoordinator coord;
    res = run_workers(plan.workers_on(job.node_rank), plan.world_size, ao, coord);
    if (res.success) return finished(ev, 0);
    if (!worth_restarting(res) || attempt >= max_restarts) return finished(ev, res.exit_code);
    restarting(ev, attempt, res.exit_code, max_restarts);
  }
}

// Who may talk to the store (docs/security.md). Reads DDPRUN_TOKEN / the token file and probes
// munged; the token is then removed from our environment so the workers do not inherit it.
rdzv::auth::Config resolve_auth(const launcher::Resolved& r, bool master, Events& ev) {
  std::optional<std::string> token;
  if (const char* t = std::getenv("DDPRUN_TOKEN"); t && *t) token = std::string(t);
  const char* sock = std::getenv("DDPRUN_MUNGE_SOCKET");
  rdzv::auth::Config cfg;
  try {
    cfg = rdzv::auth::resolve(rdzv::auth::parse_policy(r.rdzv_auth), token, r.rdzv_token_file,
                              sock ? std::string(sock) : "");
  } catch (const rdzv::Error& e) {
    // A bad token file or an unsatisfiable --rdzv-auth is the user's input: usage exit code.
    if (e.kind() == rdzv::Error::Kind::usage) throw launcher::Error(e.what());
    throw;
  }
  ::unsetenv("DDPRUN_TOKEN");
  if (master && cfg.mode == rdzv::auth::Mode::none && r.rdzv_auth == "auto") {
    const std::string msg =
        "the rendezvous store is unauthenticated (no munged, no DDPRUN_TOKEN): anyone who can "
        "reach its port can join or abort this job; see docs/security.md";
    if (ev.json()) {
      ev.emit("warning", {{"message", msg}});
    } else {
      fmt::print(stderr, "ddprun: warning: {}\n", msg);
    }
  }
  return cfg;
}

int run_distributed(const launcher::Options& o, const launcher::Resolved& r, Events& ev) {
  AgentOptions ao = agent_options(o, r);
  ao.events = &ev;
  validate_options(ao);
  const bool per_task = r.mode == launcher::Mode::per_task;
  const launcher::Plan local_plan = launcher::build_plan(r.job, r.nodes);
  // In per-task mode every task is a participant; otherwise every node.
  const int participants = per_task ? local_plan.world_size : r.nnodes_max;
  const int my_id = per_task ? *r.job.task_rank : r.job.node_rank;

  rdzv::RendezvousOptions ro;
  ro.host = r.rdzv_host;
  ro.port = r.rdzv_port;
  ro.run_id = r.job.run_id;
  ro.node_rank = my_id;
  ro.auth = resolve_auth(r, my_id == 0, ev);
  ro.log = [&ev](const std::string& line) {
    if (ev.json()) {
      ev.emit("rejected_peer", {{"message", line}});
    } else {
      fmt::print(stderr, "{}\n", line);
    }
  };
  ro.nnodes_min = per_task ? participants : r.nnodes_min;
  ro.nnodes_max = participants;
  ro.join_timeout = milliseconds(static_cast<long>(r.rdzv_timeout * 1000.0));
  ro.last_call = milliseconds(static_cast<long>(r.last_call * 1000.0));
  // Every 10 s of waiting, say who is still missing.
  ro.on_progress = [&ev, quiet = o.quiet](const std::string& m) {
    if (ev.json()) {
      ev.emit("rendezvous_waiting", {{"message", m}});
    } else if (!quiet) {
      fmt::print(stderr, "ddprun: {}\n", m);
    }
  };
  if (per_task) {
    for (const auto& w : local_plan.workers) ro.expected_hosts.push_back(w.host.value_or(""));
  } else {
    for (const auto& n : r.nodes) ro.expected_hosts.push_back(n.host.value_or(""));
  }

  rdzv::JoinInfo me;
  me.node_rank = my_id;
  me.hostname = r.self.host.value_or("localhost");
  me.addr = me.hostname;
  me.local_world_size = per_task ? 1 : r.self.local_world_size;
  me.gpus = r.self.gpus;

  rdzv::Rendezvous rz(ro);
  StoreCoordinator coord(rz);
  const int max_restarts = r.job.max_restarts;
  for (int attempt = 0;; ++attempt) {
    auto make_plan = [&](const std::vector<launcher::NodeSpec>& joined) {
      launcher::JobSpec job = r.job;
      job.restart_count = attempt;
      if (per_task) {
        // Slurm fixed the layout; the rendezvous only agrees on the port and the run.
        return launcher::build_plan(job, r.nodes);
      }
      job.nnodes = static_cast<int>(joined.size());
      job.node_rank = 0;
      return launcher::build_plan(job, joined);
    };
    launcher::Plan plan = rz.join(me, make_plan);
    std::vector<launcher::Worker> local;
    if (per_task) {
      // This task's own worker, from its own view of Slurm (its GPUs may differ from task 0's).
      launcher::JobSpec job = r.job;
      job.restart_count = attempt;
      job.master_port = plan.master_port;
      for (auto& w : launcher::build_plan(job, r.nodes).workers) {
        if (w.rank == *r.job.task_rank) local.push_back(w);
      }
    } else {
      local = plan.workers_on(plan.node_rank);
    }
    announce(ev, o, plan, attempt, my_id == 0);
    coord.reset();
    rz.watch([&coord](const rdzv::AbortInfo& a) { coord.on_abort(a); });
    ao.attempt = attempt;
    RunResult res = run_workers(local, plan.world_size, ao, coord);
    if (res.success) {
      finishing();
      return finished(ev, 0);
    }
    // Every node exits with the job's root cause: the first one published.
    int code = res.exit_code;
    std::optional<Failure> root = res.root_cause;
    if (auto published = rz.aborted()) {
      root = to_failure(*published);
      if (!res.stopped_by_signal || published->rank >= 0) code = published->exit_code;
    }
    const bool stop = res.stopped_by_signal || (root && stopped_job(*root));
    if (stop || attempt >= max_restarts) {
      finishing();
      return finished(ev, code == 0 ? 1 : code);
    }
    restarting(ev, attempt, code, max_restarts);
    rz.next_attempt();
  }
}

}  // namespace

int run_job(const launcher::Options& o, const launcher::Resolved& r) {
  Events ev(parse_log_format(o.log_format));
  ev.set_context(r.self.host.value_or("localhost"), r.job.node_rank);
  auto fail = [&](const std::string& what, int code) {
    if (ev.json()) {
      ev.emit("error", {{"message", what}, {"exit_code", code}});
    } else {
      fmt::print(stderr, "ddprun: error: {}\n", what);
    }
    return code;
  };
  try {
    if (r.mode == launcher::Mode::standalone) return run_standalone(o, r, ev);
    return run_distributed(o, r, ev);
  } catch (const rdzv::Error& e) {
    return fail(e.what(), 1);
  } catch (const launcher::Error& e) {
    return fail(e.what(), e.exit_code());
  } catch (const Error& e) {
    return fail(e.what(), e.exit_code());
  }
}

}  // namespace ddprun::agent
