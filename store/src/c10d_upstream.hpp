#pragma once
// A relay's one connection to node 0's workers' store (docs/protocol.md, "Relays"): it connects (again
// every 200 ms while node 0 cannot be reached, for up to connect_timeout), opens with the relay's tagged
// opening, sends the requests queued meanwhile and after, and hands node 0's answers back by tag.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "c10d_loop.hpp"
#include "store/c10d_codec.hpp"

namespace ddprun::store::c10d {

struct UpstreamOptions {
  std::string host;
  std::uint16_t port = 0;
  std::string source;  // numeric IPv4 address to connect from; empty: the kernel's choice
  std::chrono::milliseconds connect_timeout{60000};
};

struct UpstreamHooks {
  std::function<void(std::uint32_t tag, std::string_view answer)> answer;
  std::function<void(bool connected)> state;
  // Node 0's store is lost, or was not reached in time (`line` says which): nothing more goes through.
  // `was_up`: lost after it was reached, rather than never reached in time.
  std::function<void(const std::string& line, bool was_up)> gone;
};

// Loop thread only. Retire it to the loop after stop(): the current batch may still hold its events.
class Upstream final : public Handler, public Deferred {
 public:
  Upstream(Loop& loop, UpstreamOptions options, UpstreamHooks hooks);
  ~Upstream() override;
  Upstream(const Upstream&) = delete;
  Upstream& operator=(const Upstream&) = delete;

  void start();
  void stop();
  // Queues a tagged request (sent after the batch, or once connected).
  void send(const Request& q);
  std::size_t backlog() const { return out_.size() - out_off_; }  // bytes node 0's socket has not taken
  bool dead() const { return dead_; }

  void on_event(std::uint32_t ready) override;
  void run_deferred() override;  // sends what is queued

 private:
  struct Retry;
  void connect();
  void failed(const std::string& why);
  void on_retry();
  void read_answers();
  void split_answers();

  Loop& loop_;
  UpstreamOptions opts_;
  UpstreamHooks hooks_;
  std::unique_ptr<Handler> retry_h_;
  int retry_fd_ = -1;
  int fd_ = -1;
  bool ready_ = false;    // connected, the opening sent or queued first
  bool dead_ = false;     // gave up
  bool stopped_ = false;  // stop() called
  std::optional<std::chrono::steady_clock::time_point> failing_since_;
  std::string out_;
  std::size_t out_off_ = 0;
  std::string in_;
  std::size_t in_off_ = 0;
};

}  // namespace ddprun::store::c10d
