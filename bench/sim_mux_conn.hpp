#pragma once
// One connection carrying everything (docs/protocol.md):
// in-order answers, plus out-of-band frames at any time: status 4 (event: a watched key was
// written; number = its index, value = its value) and 5 (pong: the answer to a heartbeat).
// A reader coroutine hands in-order answers to the pending calls in order, events to a callback;
// writes are queued so that a heartbeat never tears a request apart. Frames for the two new ops
// are encoded here by hand, so this builds against main's codec too.
#include <deque>
#include <functional>
#include <memory>
#include <optional>

#include "sim_conn.hpp"

namespace sim {

inline constexpr std::uint8_t kOpHeartbeat = 12, kOpWatch = 13;
inline constexpr std::uint8_t kStatusEvent = 4, kStatusPong = 5;

inline void put_be(std::string& out, std::uint64_t v, int bytes) {
  for (int shift = 8 * (bytes - 1); shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((v >> shift) & 0xff));
}
inline std::string frame(const std::string& payload) {
  std::string f;
  put_be(f, payload.size(), 4);
  return f + payload;
}
// heartbeat: op, flags (bit 0: answer with a pong).
inline std::string heartbeat_frame(bool want_pong) {
  std::string p(1, static_cast<char>(kOpHeartbeat));
  p.push_back(static_cast<char>(want_pong ? 1 : 0));
  return frame(p);
}
// watch: label, liveness (ms), the subscribed keys.
inline std::string watch_frame(const std::string& label, std::uint64_t liveness_ms,
                               const std::vector<std::string>& keys) {
  std::string p(1, static_cast<char>(kOpWatch));
  put_be(p, label.size(), 4);
  p += label;
  put_be(p, liveness_ms, 8);
  put_be(p, keys.size(), 4);
  for (const auto& k : keys) {
    put_be(p, k.size(), 4);
    p += k;
  }
  return frame(p);
}

class MuxConn {
 public:
  using OnEvent = std::function<void(const Answer&)>;
  MuxConn(asio::io_context& io, std::uint64_t& bytes_in) : io_(io), stream_(io, bytes_in) {}

  awaitable<void> open(std::uint16_t port, const std::string& run_id, const std::string& token,
                       const std::string& label, std::uint32_t liveness_ms, OnEvent on_event) {
    on_event_ = std::move(on_event);
    co_await stream_.open_only(port);
    send(stream_.hello(run_id, token, label, liveness_ms));
    auto hello = std::make_shared<Slot>(io_);
    pending_.push_back(hello);
    asio::co_spawn(io_, reader(), asio::detached);
    const Answer h = co_await hello->get();
    if (h.status != proto::Status::ok) throw std::runtime_error("hello refused: " + h.value);
  }

  awaitable<Answer> call(const proto::Request& r) { co_return co_await call_frame(proto::encode_request(r)); }
  awaitable<Answer> call_frame(std::string f) {
    if (closed_) throw std::runtime_error("connection lost");  // no reader left to answer
    auto slot = std::make_shared<Slot>(io_);
    pending_.push_back(slot);
    send(std::move(f));
    co_return co_await slot->get();
  }
  // Out of band: no answer in order (a pong comes back).
  void heartbeat(bool want_pong) { send(heartbeat_frame(want_pong)); }
  void close() { stream_.close(); }
  bool closed() const { return closed_; }

 private:
  struct Slot {
    explicit Slot(asio::io_context& io) : t(io, std::chrono::steady_clock::time_point::max()) {}
    awaitable<Answer> get() {
      while (!a && !err) {
        boost::system::error_code ec;
        co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
      }
      if (err) std::rethrow_exception(err);
      co_return *a;
    }
    asio::steady_timer t;
    std::optional<Answer> a;
    std::exception_ptr err;
  };

  void send(std::string f) {
    out_ += f;
    if (!writing_) {
      writing_ = true;
      asio::co_spawn(io_, writer(), asio::detached);
    }
  }
  awaitable<void> writer() {
    try {
      while (!out_.empty() && !closed_) {
        std::string buf;
        buf.swap(out_);
        co_await stream_.write(buf);
      }
    } catch (const std::exception&) {
    }
    writing_ = false;
  }
  awaitable<void> reader() {
    std::exception_ptr err;
    try {
      for (;;) {
        Answer a = co_await stream_.read_answer();
        const auto st = static_cast<std::uint8_t>(a.status);
        if (st == kStatusPong) continue;
        if (st == kStatusEvent) {
          if (on_event_) on_event_(a);
          continue;
        }
        if (pending_.empty()) throw std::runtime_error("an answer nobody asked for");
        auto slot = pending_.front();
        pending_.pop_front();
        slot->a = std::move(a);
        slot->t.cancel();
      }
    } catch (const std::exception&) {
      err = std::current_exception();
    }
    closed_ = true;
    for (auto& s : pending_) {
      s->err = err;
      s->t.cancel();
    }
    pending_.clear();
    if (on_event_) on_event_(Answer{proto::Status::error, -1, "connection lost", 0});
  }

  asio::io_context& io_;
  Conn stream_;
  OnEvent on_event_;
  std::deque<std::shared_ptr<Slot>> pending_;
  std::string out_;
  bool writing_ = false;
  bool closed_ = false;
};

}  // namespace sim
