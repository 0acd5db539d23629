#include "store/answer.hpp"

#include "store/error.hpp"

namespace ddprun::store {

Answer answer(StoreData& data, proto::Request q) {
  Answer a;
  proto::Response& r = a.reply;
  switch (q.op) {
    case proto::Op::set:
      data.set(q.key, std::move(q.value));
      a.changed = std::move(q.key);
      break;
    case proto::Op::get:
      if (const auto* v = data.find(q.key)) {
        r.value = *v;
      } else {
        r.status = q.timeout_ms == 0 ? proto::Status::not_found : proto::Status::timeout;
      }
      break;
    case proto::Op::add:
      try {
        r.number = data.add(q.key, q.number);
        a.changed = std::move(q.key);
      } catch (const Error& e) {
        r.status = proto::Status::error;
        r.value = e.what();
      }
      break;
    case proto::Op::compare_set: {
      auto [value, written] = data.compare_set(q.key, q.value, q.value2);
      r.value = std::move(value);
      r.number = written ? 1 : 0;
      if (written) a.changed = std::move(q.key);
      break;
    }
    case proto::Op::check:
      r.number = data.check(q.keys) ? 1 : 0;
      break;
    case proto::Op::del:
      r.number = data.del(q.key) ? 1 : 0;
      break;
    case proto::Op::num_keys:
      r.number = data.num_keys();
      break;
    case proto::Op::wait:
      if (!data.check(q.keys)) r.status = proto::Status::timeout;
      break;
    case proto::Op::wait_any:
      if (auto i = data.first_present(q.keys)) {
        r.number = static_cast<std::int64_t>(*i);
      } else {
        r.status = proto::Status::timeout;
      }
      break;
    case proto::Op::ping:
    case proto::Op::heartbeat:  // the server answers these two itself (connection.cpp)
    case proto::Op::watch:
      break;
  }
  return a;
}

bool ready(const StoreData& data, const proto::Request& q) {
  switch (q.op) {
    case proto::Op::get:
      return data.find(q.key) != nullptr;
    case proto::Op::wait:
      return data.check(q.keys);
    case proto::Op::wait_any:
      return data.first_present(q.keys).has_value();
    default:
      return true;
  }
}

}  // namespace ddprun::store
