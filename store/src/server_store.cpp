// ServerStore: node 0's in-process view of its own store, through StoreServer::apply().
#include "store/answer.hpp"
#include "store/server.hpp"

namespace ddprun::store {
namespace {

proto::Request request(proto::Op op, std::string key = {}) {
  proto::Request q;
  q.op = op;
  q.key = std::move(key);
  return q;
}

}  // namespace

void ServerStore::set(const std::string& key, const std::string& value) {
  auto q = request(proto::Op::set, key);
  q.value = value;
  server_.apply(std::move(q));
}

std::optional<std::string> ServerStore::get(const std::string& key, Millis) {
  auto r = server_.apply(request(proto::Op::get, key));
  if (r.status != proto::Status::ok) return std::nullopt;
  return std::move(r.value);
}

std::int64_t ServerStore::add(const std::string& key, std::int64_t delta) {
  auto q = request(proto::Op::add, key);
  q.number = delta;
  return server_.apply(std::move(q)).number;
}

std::string ServerStore::compare_set(const std::string& key, const std::string& expected,
                                     const std::string& desired) {
  auto q = request(proto::Op::compare_set, key);
  q.value = expected;
  q.value2 = desired;
  return std::move(server_.apply(std::move(q)).value);
}

bool ServerStore::check(const std::vector<std::string>& keys) {
  auto q = request(proto::Op::check);
  q.keys = keys;
  return server_.apply(std::move(q)).number != 0;
}

bool ServerStore::del(const std::string& key) {
  return server_.apply(request(proto::Op::del, key)).number != 0;
}

std::int64_t ServerStore::num_keys() {
  return server_.apply(request(proto::Op::num_keys)).number;
}

bool ServerStore::wait(const std::vector<std::string>& keys, Millis) {
  return check(keys);
}

std::optional<std::size_t> ServerStore::wait_any(const std::vector<std::string>& keys, Millis) {
  auto q = request(proto::Op::wait_any);
  q.keys = keys;
  auto r = server_.apply(std::move(q));
  if (r.status != proto::Status::ok) return std::nullopt;
  return static_cast<std::size_t>(r.number);
}

}  // namespace ddprun::store
