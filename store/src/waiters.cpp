// Blocked get/wait/wait_any requests: a timer per waiter, cancelled by the write that satisfies it.
#include "waiters.hpp"

#include <algorithm>
#include <span>

#include <fmt/core.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include "server_impl.hpp"
#include "store/answer.hpp"

namespace ddprun::store {
namespace detail {
namespace {

std::span<const std::string> waited_keys(const proto::Request& q) {
  if (q.op == proto::Op::get) return {&q.key, 1};
  return q.keys;
}

// The reply a woken waiter gets; its requests change nothing, so the data is only read.
proto::Response answer_of(const StoreData& data, const proto::Request& q) {
  return answer(const_cast<StoreData&>(data), q).reply;
}

}  // namespace

void Waiters::add(const WaiterPtr& w) {
  for (const auto& k : waited_keys(w->request)) by_key_[k].insert(w);
  ++count_;
}

void Waiters::remove(const WaiterPtr& w) {
  for (const auto& k : waited_keys(w->request)) {
    if (k == w->fired_by) continue;  // notify() took it off that list already
    auto it = by_key_.find(k);
    if (it == by_key_.end()) continue;
    it->second.erase(w);
    if (it->second.empty()) by_key_.erase(it);
  }
  --count_;
}

// Fired waiters leave this key's list here, in one pass: 1000s of agents waiting on one key
// must not each search the list when they wake.
void Waiters::notify(const std::string& key, const StoreData& data) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return;
  std::vector<WaiterPtr> fired;
  std::erase_if(it->second, [&](const WaiterPtr& w) {
    if (!ready(data, w->request)) return false;
    fired.push_back(w);
    return true;
  });
  if (it->second.empty()) by_key_.erase(it);
  std::shared_ptr<const std::string> get_reply;  // every get on `key` gets the same value
  for (const auto& w : fired) {
    w->fired_by = key;
    if (w->request.op == proto::Op::get) {
      if (!get_reply)
        get_reply = std::make_shared<const std::string>(proto::encode_response(answer_of(data, w->request)));
      w->reply = get_reply;
    } else {
      w->reply = std::make_shared<const std::string>(proto::encode_response(answer_of(data, w->request)));
    }
    w->timer.cancel();
  }
}

}  // namespace detail

void StoreServer::Impl::block(const ConnPtr& c, proto::Request q) {
  if (waiters.size() >= opts.max_waiters) {
    send(c, proto::encode_response(
                {proto::Status::error, 0,
                 fmt::format("too many blocked requests on the store (limit {})", opts.max_waiters)}));
    return;
  }
  c->blocked = true;
  boost::asio::co_spawn(io, wait_for(c, std::move(q)), boost::asio::detached);
}

boost::asio::awaitable<void> StoreServer::Impl::wait_for(ConnPtr c, proto::Request q) {
  const auto timeout =
      std::chrono::milliseconds(static_cast<std::int64_t>(std::min<std::uint64_t>(q.timeout_ms, 1ULL << 40)));
  auto w = std::make_shared<detail::Waiter>(io.get_executor(), std::move(q));
  waiters.add(w);
  c->waiter = w;
  w->timer.expires_after(clamp_timeout(timeout));
  co_await w->timer.async_wait(detail::use_nothrow);

  waiters.remove(w);
  c->waiter.reset();
  c->blocked = false;
  if (!c->open) co_return;
  if (w->reply) {
    send_shared(c, std::move(w->reply));
    co_return;
  }
  // Timed out (or the server stops): the reply is what the data says now.
  send(c, proto::encode_response(answer(data, std::move(w->request)).reply));
}

}  // namespace ddprun::store
