#include "teardown.hpp"

#include <csignal>

namespace ddprun::agent {

namespace {
// After every worker ended, output still held by escaped grandchildren is read this long at most.
constexpr std::chrono::milliseconds kDrainTimeout{2000};
}  // namespace

Teardown::Teardown(boost::asio::io_context& io, const std::vector<std::unique_ptr<Proc>>& procs,
                   std::chrono::milliseconds grace)
    : procs_(procs), grace_(grace), kill_timer_(io), drain_timer_(io) {}

void Teardown::start(int sig) {
  if (started_) return;
  started_ = true;
  signal_live(sig);
  kill_timer_.expires_after(grace_);
  kill_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) kill_all();
  });
}

void Teardown::signal_live(int sig) const {
  for (const auto& p : procs_) {
    if (!p->end.exited) p->signal(sig);
  }
}

void Teardown::kill_all() const {
  for (const auto& p : procs_) p->signal_group(SIGKILL);
}

void Teardown::all_exited() {
  if (cleanup_started_) return;
  cleanup_started_ = true;
  kill_timer_.cancel();
  kill_all();  // whatever the workers left behind in their groups
  drain_timer_.expires_after(kDrainTimeout);
  drain_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    for (const auto& p : procs_) p->stop_reading();  // held open by a process outside the groups
  });
}

}  // namespace ddprun::agent
