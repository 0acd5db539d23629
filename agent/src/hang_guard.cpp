#include "hang_guard.hpp"

#include <utility>

namespace ddprun::agent {

HangGuard::HangGuard(boost::asio::io_context& io, const std::vector<std::unique_ptr<Proc>>& procs,
                     HangSettings settings, std::function<void(const std::vector<HungRank>&)> hung)
    : s_(std::move(settings)), watch_(io, s_.timeout, std::move(hung)), stacks_(io, procs) {}

void HangGuard::prepare(const CommandSpec& spec, const std::string& path_env) {
  python_ = python_worker(spec);
  path_env_ = path_env;
  if (heartbeats() && !heartbeats_) heartbeats_.emplace(s_.log_dir, s_.requeue, s_.attempt);
}

std::map<std::string, std::string> HangGuard::worker_env(const core::Worker& w,
                                                         const std::vector<std::string>& base) {
  if (!heartbeats_) return w.env;
  paths_.push_back(heartbeats_->create(w.rank));
  return heartbeat_env(w.env, base, paths_.back(), python_, enabled());
}

void HangGuard::started(std::size_t worker, int rank, const std::map<std::string, std::string>& env) {
  const auto it = env.find("DDPRUN_HEARTBEAT_FILE");
  if (heartbeats_ && it != env.end()) watch_.add(worker, rank, it->second);
}

void HangGuard::line(std::size_t worker, bool is_err, std::string_view text) {
  watch_.progress(worker);
  stacks_.line(worker, is_err, text);
}

void HangGuard::collect(const std::vector<HungRank>& hung, const std::vector<std::string>& stacks_files,
                        std::function<void()> done) {
  declared_ = true;
  watch_.stop();
  stacks_.start(hung, python_, path_env_, stacks_files, std::move(done));
}

}  // namespace ddprun::agent
