#pragma once
// One simulated agent connection to the rendezvous store: an Asio coroutine client speaking the
// store's wire codec (store/include/store/codec.hpp), many per thread. Used by bench/rdzv_scale.
//
// Answers are read as a stream: a small answer is decoded with proto::decode_response; a large one
// (a published plan, up to 32 MiB) is counted and dropped, so that 1000s of agents reading the
// plan at once do not hold 1000s of copies of it in the simulator.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <boost/asio.hpp>

#include "store/auth.hpp"
#include "store/codec.hpp"

namespace sim {

namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;
using asio::ip::tcp;
namespace proto = ddprun::store::proto;

struct Answer {
  proto::Status status = proto::Status::ok;
  std::int64_t number = 0;
  std::string value;           // empty when the value was too big to keep
  std::size_t value_size = 0;  // bytes of the value on the wire
};

// Large answers are not kept (see above).
inline constexpr std::size_t kKeepMax = 64 * 1024;

// One thread per io_context, so one read buffer per thread serves every connection on it.
inline std::array<char, 64 * 1024>& read_buffer() {
  thread_local std::array<char, 64 * 1024> buf;
  return buf;
}

// Each connection leaves from its own loopback address (127.1.0.1 and up), as each agent is its own
// host on a cluster. From one address, the kernel's search for a free ephemeral port towards the one
// server port grows with the connections already open (O(N^2) at 16k: most of the simulator's time
// in __inet_check_established), a cost no real agent pays.
inline asio::ip::address_v4 next_source_address() {
  static std::atomic<std::uint32_t> n{0};
  return asio::ip::address_v4(0x7F010000u + ++n);
}

class Conn {
 public:
  Conn(asio::io_context& io, std::uint64_t& bytes_in) : sock_(io), bytes_in_(bytes_in) {}

  // Retries like ddprun's client (store/src/client_connect.cpp): 50 ms doubling to 1 s, +-50%
  // jitter, up to the join timeout (here 600 s).
  awaitable<void> open_only(std::uint16_t port) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(600);
    std::chrono::milliseconds delay(50);
    const auto source = next_source_address();
    for (;;) {
      boost::system::error_code ec;
      sock_.open(tcp::v4());
      // Without it, this socket's TIME_WAIT after the run keeps its port from the next run's
      // master, which listens on 0.0.0.0 ("Address already in use").
      sock_.set_option(tcp::socket::reuse_address(true));
      sock_.bind(tcp::endpoint(source, 0));
      co_await sock_.async_connect(tcp::endpoint(asio::ip::address_v4::loopback(), port),
                                   asio::redirect_error(use_awaitable, ec));
      if (!ec) break;
      if (std::chrono::steady_clock::now() > deadline) throw boost::system::system_error(ec);
      sock_.close();
      asio::steady_timer t(sock_.get_executor());
      t.expires_after(delay / 2 + std::chrono::milliseconds(std::rand() % (delay.count() + 1)));
      co_await t.async_wait(use_awaitable);
      delay = std::min(delay * 2, std::chrono::milliseconds(1000));
    }
    sock_.set_option(tcp::no_delay(true));
    sock_.non_blocking(true);
  }
  static std::string hello(const std::string& run_id, const std::string& token, const std::string& label,
                           std::uint32_t liveness_ms) {
    proto::Hello h;
    h.run_id = run_id;
    h.label = label;
    h.liveness_ms = liveness_ms;
    if (!token.empty()) {
      h.auth = static_cast<std::uint8_t>(ddprun::store::auth::Mode::token);
      h.credential =
          ddprun::store::auth::token_credential(token, run_id, label, ddprun::store::auth::random_nonce());
    }
    return proto::encode_hello(h);
  }
  // Connects and queues the hello: it goes out with the first request (as ddprun's client does).
  awaitable<void> open(std::uint16_t port, const std::string& run_id, const std::string& token,
                       const std::string& label, std::uint32_t liveness_ms) {
    co_await open_only(port);
    pending_ = hello(run_id, token, label, liveness_ms);
    hello_unanswered_ = true;
  }
  awaitable<void> write(const std::string& bytes) {
    co_await asio::async_write(sock_, asio::buffer(bytes), use_awaitable);
  }

  // Sends one request and returns its answer (a refused hello throws with the server's reason).
  awaitable<Answer> call(const proto::Request& r) {
    pending_ += proto::encode_request(r);
    std::string out;
    out.swap(pending_);
    co_await asio::async_write(sock_, asio::buffer(out), use_awaitable);
    if (hello_unanswered_) {
      hello_unanswered_ = false;
      Answer h = co_await read_answer();
      if (h.status != proto::Status::ok) throw std::runtime_error("hello refused: " + h.value);
    }
    co_return co_await read_answer();
  }

  void close() {
    boost::system::error_code ec;
    sock_.close(ec);
  }

  // Until in_ holds at least n bytes.
  awaitable<void> fill(std::size_t n) {
    while (in_.size() < n) co_await read_more(true);
  }

  // One read; kept in in_ or (keep=false) only counted.
  awaitable<std::size_t> read_more(bool keep) {
    auto& buf = read_buffer();
    for (;;) {
      boost::system::error_code ec;
      const std::size_t got = sock_.read_some(asio::buffer(buf), ec);
      if (!ec) {
        bytes_in_ += got;
        if (keep) in_.append(buf.data(), got);
        co_return got;
      }
      if (ec != asio::error::would_block) throw boost::system::system_error(ec);
      co_await sock_.async_wait(tcp::socket::wait_read, use_awaitable);
    }
  }

  static std::uint64_t be(const std::string& s, std::size_t at, int bytes) {
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i)
      v = (v << 8) | static_cast<unsigned char>(s[at + static_cast<std::size_t>(i)]);
    return v;
  }

  awaitable<Answer> read_answer() {  // one whole answer (in order or not)
    co_await fill(proto::kHeaderSize);
    const std::size_t len = be(in_, 0, 4);
    if (len <= kKeepMax) {
      // Parsed here rather than by proto::decode_response: that one refuses the out-of-band
      // statuses (4, 5) of the one-connection protocol.
      co_await fill(proto::kHeaderSize + len);
      if (len < 13 || be(in_, 13, 4) != len - 13) throw std::runtime_error("malformed answer");
      Answer a{static_cast<proto::Status>(static_cast<unsigned char>(in_[4])),
               static_cast<std::int64_t>(be(in_, 5, 8)), in_.substr(17, len - 13), len - 13};
      in_.erase(0, proto::kHeaderSize + len);
      co_return a;
    }
    // status u8, number i64, value length u32, then the value: counted, not kept.
    co_await fill(proto::kHeaderSize + 13);
    Answer a;
    a.status = static_cast<proto::Status>(static_cast<unsigned char>(in_[4]));
    a.number = static_cast<std::int64_t>(be(in_, 5, 8));
    a.value_size = be(in_, 13, 4);
    std::size_t left = proto::kHeaderSize + len;
    const std::size_t have = std::min(left, in_.size());
    in_.erase(0, have);
    left -= have;
    // Only this answer is outstanding on the connection, so nothing after it arrives meanwhile.
    while (left > 0) left -= std::min(left, co_await read_more(false));
    co_return a;
  }

 private:
  tcp::socket sock_;
  std::uint64_t& bytes_in_;
  std::string pending_;
  std::string in_;
  bool hello_unanswered_ = false;
};

}  // namespace sim
