#include "status_publisher.hpp"

#include "agent/hang_watch.hpp"
#include "agent/heartbeat_step.hpp"
#include "agent/live_stacks.hpp"
#include "core/error.hpp"
#include "core/stack_groups.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <exception>
#include <utility>

#include <fmt/format.h>

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
  stacks_files_ = std::move(stacks_files);
  path_env_ = std::move(path_env);
  serve_stacks_ = true;
}

void StatusPublisher::start(std::function<core::NodeStatus()> snapshot,
                            std::function<std::vector<std::string>()> heartbeat_files) {
  snapshot_ = std::move(snapshot);
  heartbeat_files_ = std::move(heartbeat_files);
  thread_ = std::thread([this] { run_thread(); });
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
    if (ended) {
      {
        std::lock_guard lk(mu_);
        last_published_ = true;
      }
      cv_.notify_all();
      if (!last) serve_until_stopped(s);
      return;
    }
    if (last) return;
    if (serve_stacks_) answer_stacks(s);
  }
}

// Between the workers' end and stop() (the exit barrier): `ddprun stacks` still gets this node's answer,
// its ranks as ended, checked every interval.
void StatusPublisher::serve_until_stopped(const core::NodeStatus& last) {
  for (;;) {
    if (serve_stacks_) answer_stacks(last);
    std::unique_lock lk(mu_);
    if (cv_.wait_for(lk, interval_, [this] { return stopping_; })) return;
  }
}

namespace {
// Per rank: eu-stack or the Python dump, each bounded; a node's reply within about ranks x this.
constexpr std::chrono::milliseconds kLiveStackBound{3000};
}  // namespace

// `ddprun stacks`: after each publication (about a second), the request the store last pushed to
// this agent's watch; a new nonce is answered once, with this node's selected ranks. Off the loop,
// like the /proc reads.
void StatusPublisher::answer_stacks(const core::NodeStatus& s) {
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
