#include "node_relay.hpp"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "store/client.hpp"
#include "store/error.hpp"
#include "store_coordinator.hpp"

namespace ddprun::launcher {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kLocalGather{3000};  // the node's records, before node 0's gather ends (5 s)
constexpr milliseconds kRootWait{3000};     // a member waits this long for the root its relay passes down
constexpr milliseconds kPoll{100};          // the relay looks for an abort while the node arrives

milliseconds left_until(Clock::time_point deadline) {
  return std::max(milliseconds{0}, std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
}

}  // namespace

// ---- PerTaskCoordinator

std::string PerTaskCoordinator::key(const std::string& name) const {
  return fmt::format("/pertask/attempt_{}/{}", attempt(), name);
}

agent::PublishOutcome PerTaskCoordinator::publish_failure(const core::Failure& f, milliseconds bound) {
  const auto deadline = Clock::now() + bound;
  try {
    if (!relay()) {
      // The relay's watch takes it up to the job, and passes the job's root cause back down.
      const core::Failure first = s_.down->abort(f, bound);
      return {job_root_or(first, std::min(kRootWait, left_until(deadline))), {}};
    }
    const core::Failure root = s_.up->abort(f, bound);
    tell_node(root);
    return {root, {}};
  } catch (const std::exception& e) {
    if (relay()) tell_node(f);  // node 0 did not answer: this node's tasks still stop for it
    return {std::nullopt, e.what()};
  }
}

void PerTaskCoordinator::set_remote_abort_handler(agent::AbortHandler h) {
  const auto watch = [this] {
    if (relay()) {
      s_.up->watch([this](const core::Failure& f) { on_up(f); });
      if (s_.down) s_.down->watch([this](const core::Failure& f) { on_down(f); });
    } else {
      // The node-local abort is the node's first failure; the job's root comes right behind it.
      s_.down->watch([this](const core::Failure& f) {
        std::lock_guard life(life_mu_);
        if (!closed_) deliver(job_root_or(f, kRootWait), !s_.down->node0_lost());
      });
    }
  };
  install_abort_handler(mu_, handler_, watched_attempt_, attempt(), std::move(h), watch,
                        [this] { delivered_ = false; });
}

// The job's root cause (or a lost node 0): down to the node's tasks, then to our supervisor.
void PerTaskCoordinator::on_up(const core::Failure& root) {
  std::lock_guard life(life_mu_);
  if (closed_) return;
  tell_node(root);
  deliver(root, !s_.up->node0_lost());
}

// A failure on this node (a task's, or a local task lost): up to the job; the winner comes back.
void PerTaskCoordinator::on_down(const core::Failure& local) {
  std::lock_guard life(life_mu_);
  if (closed_) return;
  const core::Failure root = s_.up->abort(local);
  tell_node(root);
  deliver(root, true);
}

// The root key first, so that a member that reads the abort finds the job's root beside it.
void PerTaskCoordinator::tell_node(const core::Failure& root) {
  if (!s_.down) return;
  try {
    auto c = s_.connect_local();
    c->set(key("root"), core::encode_failure(root));
    c->flush();
  } catch (const store::Error&) {
    // Our own node-local store is gone: nobody left to tell.
  }
  s_.down->abort(root);
}

void PerTaskCoordinator::close() {
  std::lock_guard life(life_mu_);
  closed_ = true;
}

void PerTaskCoordinator::deliver(const core::Failure& root, bool from_store) {
  std::lock_guard lock(mu_);
  if (!handler_ || delivered_) return;
  delivered_ = true;
  handler_(root, from_store);
}

// A member: the job's root cause as the relay passed it down, waiting at most `wait` for it; `local`
// when the relay is gone (that is the root then) or its record is unreadable.
core::Failure PerTaskCoordinator::job_root_or(const core::Failure& local, milliseconds wait) {
  try {
    auto c = s_.connect_local();
    if (auto v = c->get(key("root"), wait)) return core::decode_failure(*v);
  } catch (const std::exception&) {
  }
  return local;
}

// ---- the exit barrier: the node's tasks arrive at the relay, then the relay meets the job

agent::BarrierOutcome PerTaskCoordinator::exit_barrier() {
  if (!relay()) {
    try {
      auto c = s_.connect_local();
      c->set(key(fmt::format("exit/{}", s_.local)), "1");
      c->flush();
    } catch (const store::Error& e) {
      // The relay could not be told, so it would wait for this task: the node's failure, which the relay
      // (if it is there at all) takes up to the job.
      core::Failure f;
      f.reason = fmt::format("local task {} could not reach its node's relay at the exit barrier: {}",
                             s_.local, e.what());
      f.exit_code = 1;
      f.time = core::failure_now();
      return {job_root_or(s_.down->abort(f), kRootWait), false};
    }
    auto local = s_.down->exit_barrier();
    if (!local.root) return {};
    // A lost relay is this task's own judgement; an abort the relay holds comes with the job's root.
    if (!local.from_store) return {std::move(local.root), false};
    return {job_root_or(*local.root, kRootWait), true};
  }
  if (s_.down) {
    if (auto root = wait_local_arrivals(); root.root) return root;
  }
  auto end = s_.up->exit_barrier();
  if (end.root) {
    tell_node(*end.root);
    return {std::move(end.root), end.from_store};
  }
  // Every task of the job is through: release ours (they are waiting already).
  if (s_.down && !s_.down->barrier("exit", milliseconds{10000})) {
    if (auto local = s_.down->aborted()) return {std::move(local), true};
  }
  return {};
}

// No root once every other task of the node reached the exit barrier; else the node's failure (the
// job's root cause as far as known) that ended the wait.
agent::BarrierOutcome PerTaskCoordinator::wait_local_arrivals() {
  std::vector<std::string> keys;
  for (int i = 1; i < s_.local_tasks; ++i) keys.push_back(key(fmt::format("exit/{}", i)));
  try {
    auto c = s_.connect_local();
    while (!c->wait(keys, kPoll)) {
      if (auto local = s_.down->aborted()) return {s_.up->abort(*local), true};
    }
    return {};
  } catch (const store::Error& e) {
    core::Failure f;
    f.reason =
        fmt::format("the node's relay lost its own node-local store at the exit barrier: {}", e.what());
    f.exit_code = 1;
    f.time = core::failure_now();
    return {s_.up->abort(f), true};
  }
}

// ---- end-of-run records: members to their relay, one bundle per node to node 0

bool PerTaskCoordinator::publish_result(const std::string& record) {
  if (!relay()) return s_.down->publish_result(record);
  std::vector<std::optional<std::string>> records{record};
  if (s_.down && s_.down->publish_result(record)) {
    records.clear();
    for (auto& r : s_.down->gather_results(kLocalGather)) records.push_back(std::move(r.record));
  }
  return s_.up->publish_result(encode_bundle(records));
}

std::vector<agent::PeerRecord> PerTaskCoordinator::gather_results(milliseconds timeout,
                                                                  std::optional<int> lost) {
  // `lost` names a task or a node depending on who reported it: node 0 waits for every node's
  // bundle instead, which ends early once no other relay is connected.
  (void)lost;
  if (!relay()) return {};
  const auto deadline = Clock::now() + timeout;
  auto nodes = s_.up->gather_results(timeout);
  // The gather ends early once no relay is connected or watching any more (after the barrier), but
  // a relay sends its bundle only after gathering its node's (at most kLocalGather): give it that.
  const auto grace = std::min(deadline, Clock::now() + kLocalGather + kPoll);
  const auto missing = [](const auto& ns) {
    return std::any_of(ns.begin(), ns.end(), [](const auto& n) { return !n.record; });
  };
  while (!nodes.empty() && missing(nodes) && Clock::now() < grace) {
    nodes = s_.up->gather_results(std::min(left_until(grace), milliseconds{500}));
  }
  if (nodes.empty()) return {};
  return unpack_bundles(nodes, s_.node_ranks);
}

}  // namespace ddprun::launcher
