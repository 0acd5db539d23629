#include "status_publisher.hpp"

#include "agent/heartbeat_step.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <exception>
#include <utility>

namespace ddprun::agent {

namespace {

// A small /proc file in one read; "" when it cannot be read (the worker is gone).
std::string read_small(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  char buf[1024];
  std::string out;
  ssize_t n = 0;
  while ((n = ::read(fd, buf, sizeof buf)) > 0 && out.size() < 4096)
    out.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  return out;
}

std::int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

StatusPublisher::StatusPublisher(boost::asio::io_context& io, Coordinator& coord,
                                 std::chrono::milliseconds interval)
    : coord_(coord), interval_(interval), timer_(io) {}

StatusPublisher::~StatusPublisher() {
  stop();
}

void StatusPublisher::started(std::size_t worker) {
  if (live_.size() <= worker) live_.resize(worker + 1);
  live_[worker].start = SteadyClock::now();
}

void StatusPublisher::line(std::size_t worker, std::string_view text) {
  if (worker >= live_.size()) return;
  Live& l = live_[worker];
  l.output = SteadyClock::now();
  // Blank lines move the progress, not the line shown.
  if (text.find_first_not_of(" \t\r") == std::string_view::npos) return;
  l.line = core::clean_status_line(text);
}

void StatusPublisher::output(std::size_t worker, std::string_view open_line) {
  line(worker, open_line);
}

void StatusPublisher::serve_stacks(std::vector<std::string> stacks_files, std::string path_env) {
  stacks_ =
      std::make_unique<StacksResponder>(coord_, interval_, std::move(stacks_files), std::move(path_env));
}

void StatusPublisher::start(std::function<core::NodeStatus()> snapshot,
                            std::function<std::vector<std::string>()> heartbeat_files) {
  snapshot_ = std::move(snapshot);
  heartbeat_files_ = std::move(heartbeat_files);
  thread_ = std::thread([this] { run_thread(); });
  if (stacks_) stacks_->start();
  tick();
}

void StatusPublisher::tick() {
  offer(snapshot_());
  timer_.expires_after(interval_);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) tick();
  });
}

void StatusPublisher::offer(core::NodeStatus s) {
  std::vector<std::string> files = heartbeat_files_ ? heartbeat_files_() : std::vector<std::string>{};
  std::lock_guard lk(mu_);
  slot_ = std::move(s);  // a record still waiting is older: replaced
  slot_files_ = std::move(files);
  cv_.notify_one();
}

void StatusPublisher::workers_ended() {
  if (stopped_ || !thread_.joinable()) return;
  timer_.cancel();
  core::NodeStatus last = snapshot_();  // how the run ended, for a `top` still looking
  std::vector<std::string> files = heartbeat_files_ ? heartbeat_files_() : std::vector<std::string>{};
  std::unique_lock lk(mu_);
  if (ended_) return;
  slot_ = std::move(last);
  slot_files_ = std::move(files);
  ended_ = true;
  cv_.notify_one();
  // Published (a set that never waits) before the exit barrier holds the connection.
  cv_.wait(lk, [this] { return last_published_; });
}

void StatusPublisher::stop() {
  if (stopped_) return;
  stopped_ = true;
  timer_.cancel();
  if (!thread_.joinable()) return;
  bool ended = false;
  {
    std::lock_guard lk(mu_);
    ended = ended_;
  }
  if (snapshot_ && !ended) offer(snapshot_());  // how the run ended, for a `top` still looking
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  thread_.join();
  if (stacks_) stacks_->stop();  // after the exit barrier: it answered `ddprun stacks` until now
}

void StatusPublisher::run_thread() {
  for (;;) {
    core::NodeStatus s;
    std::vector<std::string> files;
    bool last = false;
    bool ended = false;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [this] { return slot_.has_value() || stopping_; });
      if (!slot_) return;
      s = std::move(*slot_);
      slot_.reset();
      files = std::move(slot_files_);
      last = stopping_;
      ended = ended_;
    }
    add_proc_figures(s);
    add_steps(s, files);
    s.published_ms = unix_ms_now();
    try {
      coord_.publish_status(s.node_rank, core::encode_node_status(s));
    } catch (const std::exception&) {
      // The status is best effort: the next one may go through.
    }
    if (stacks_) stacks_->update(s);
    if (ended) {
      {
        std::lock_guard lk(mu_);
        last_published_ = true;
      }
      cv_.notify_all();
      return;  // the responder goes on answering with this record until stop()
    }
    if (last) return;
  }
}

// RSS and CPU% of each live worker's process (its group leader), from /proc: off the loop.
void StatusPublisher::add_proc_figures(core::NodeStatus& s) {
  static const long page = ::sysconf(_SC_PAGESIZE);
  static const long hz = ::sysconf(_SC_CLK_TCK);
  const auto now = SteadyClock::now();
  for (auto& r : s.ranks) {
    if (r.pid <= 0 || r.state == core::RankState::exited || r.state == core::RankState::stopped) {
      cpu_.erase(r.pid);
      continue;
    }
    const std::string dir = "/proc/" + std::to_string(r.pid);
    if (const auto pages = core::parse_proc_statm_resident_pages(read_small(dir + "/statm"))) {
      r.rss_bytes = *pages * static_cast<std::uint64_t>(page > 0 ? page : 4096);
    }
    if (const auto ticks = core::parse_proc_stat_cpu_ticks(read_small(dir + "/stat"))) {
      const auto it = cpu_.find(r.pid);
      if (it != cpu_.end()) {
        r.cpu_percent = core::cpu_percent(it->second.ticks, *ticks,
                                          std::chrono::duration<double>(now - it->second.at).count(), hz);
      }
      cpu_[r.pid] = {*ticks, now};
    }
  }
}

// Each rank's step from its heartbeat file (a file read each: off the loop), exited ranks too: where
// a rank got to is what a user looks for after a crash.
void StatusPublisher::add_steps(core::NodeStatus& s, const std::vector<std::string>& heartbeat_files) {
  for (std::size_t i = 0; i < s.ranks.size() && i < heartbeat_files.size(); ++i) {
    if (!heartbeat_files[i].empty()) s.ranks[i].step = read_heartbeat_step(heartbeat_files[i]);
  }
}

}  // namespace ddprun::agent
