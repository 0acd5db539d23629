#pragma once
// `ddprun stacks` on this agent (docs/observe.md): a thread of its own looks, every interval, at the
// request the store last pushed to this agent's watch and answers a new one (its nonce) once, with the
// selected ranks' stacks, each bounded (about 3 s for a rank that does not answer). Apart from the status
// thread, so that a collection never holds up `ddprun top`'s records; the status thread hands it each
// record it published: the ranks (pid, state) a request is answered about.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "agent/coordinator.hpp"
#include "core/status.hpp"

namespace ddprun::agent {

class StacksResponder {
 public:
  // `stacks_files`: each worker's stacks file (worker index order, "" for none; live_stacks.hpp);
  // `path_env`: the workers' PATH (for eu-stack).
  StacksResponder(Coordinator& coord, std::chrono::milliseconds interval,
                  std::vector<std::string> stacks_files, std::string path_env);
  ~StacksResponder();
  StacksResponder(const StacksResponder&) = delete;
  StacksResponder& operator=(const StacksResponder&) = delete;

  void start();
  // The newest record (any thread): later requests are answered about its ranks; after the workers
  // ended, the last one (ended ranks as ended) until stop().
  void update(const core::NodeStatus& s);
  // Ends the thread after a collection under way (bounded). Idempotent.
  void stop();

 private:
  void run();
  void answer(const core::NodeStatus& s);

  Coordinator& coord_;
  std::chrono::milliseconds interval_;
  std::vector<std::string> stacks_files_;
  std::string path_env_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<core::NodeStatus> latest_;  // under mu_
  bool stopping_ = false;                   // under mu_
  std::thread thread_;
  std::string answered_nonce_;  // the thread's only: the last request answered
  std::optional<std::pair<std::string, std::string>> pending_reply_;  // the thread's only: not written yet
};

}  // namespace ddprun::agent
