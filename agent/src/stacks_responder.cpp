#include "stacks_responder.hpp"

#include "agent/hang_watch.hpp"
#include "agent/live_stacks.hpp"
#include "core/error.hpp"
#include "core/stack_groups.hpp"

#include <fmt/format.h>

namespace ddprun::agent {

namespace {
// Per rank: eu-stack or the Python dump, each bounded; a node's reply within about ranks x this.
constexpr std::chrono::milliseconds kLiveStackBound{3000};
}  // namespace

StacksResponder::StacksResponder(Coordinator& coord, std::chrono::milliseconds interval,
                                 std::vector<std::string> stacks_files, std::string path_env)
    : coord_(coord),
      interval_(interval),
      stacks_files_(std::move(stacks_files)),
      path_env_(std::move(path_env)) {}

StacksResponder::~StacksResponder() {
  stop();
}

void StacksResponder::start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
}

void StacksResponder::update(const core::NodeStatus& s) {
  std::lock_guard lk(mu_);
  latest_ = s;
}

void StacksResponder::stop() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StacksResponder::run() {
  std::unique_lock lk(mu_);
  for (;;) {
    if (cv_.wait_for(lk, interval_, [this] { return stopping_; })) return;
    if (!latest_) continue;  // no record yet: no ranks to answer about
    const core::NodeStatus s = *latest_;
    lk.unlock();
    answer(s);
    lk.lock();
  }
}

// A new request (nonce) is answered once, with this node's selected ranks; a reply that could not be
// written (a connection another call holds) is retried every interval.
void StacksResponder::answer(const core::NodeStatus& s) {
  if (pending_reply_ && coord_.write_shared(pending_reply_->first, pending_reply_->second))
    pending_reply_.reset();
  const auto text = coord_.stacks_request();
  if (!text) return;
  core::StacksRequest req;
  try {
    req = core::decode_stacks_request(*text);
  } catch (const core::Error&) {
    return;  // not ours to answer
  }
  if (req.nonce == answered_nonce_) return;
  answered_nonce_ = req.nonce;
  core::NodeStacks out{s.node_rank, s.host, {}};
  for (std::size_t i = 0; i < s.ranks.size(); ++i) {
    const auto& r = s.ranks[i];
    if (req.ranks && req.ranks->count(r.rank) == 0) continue;
    std::string stack;
    if (r.state == core::RankState::exited || r.state == core::RankState::stopped || r.pid <= 0) {
      stack = fmt::format("(no stack: the worker has ended, exit code {})\n", r.exit_code.value_or(-1));
    } else {
      const std::string file = i < stacks_files_.size() ? stacks_files_[i] : std::string();
      stack = live_stack(static_cast<pid_t>(r.pid), file, path_env_, kLiveStackBound);
    }
    out.ranks.push_back({r.rank, cap_stack(std::move(stack))});
  }
  std::string key = core::stacks_reply_key(req.nonce, s.node_rank);
  std::string value = core::encode_node_stacks(out);
  if (!coord_.write_shared(key, value)) pending_reply_.emplace(std::move(key), std::move(value));
}

}  // namespace ddprun::agent
