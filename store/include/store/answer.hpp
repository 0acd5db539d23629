#pragma once
// The store server's reply to a request, computed from the data alone: no sockets, no waiting.
// The server calls it when a request arrives and again when a blocked one wakes or times out, so
// both paths give the same reply.
#include <optional>
#include <string>

#include "store/codec.hpp"
#include "store/store.hpp"

namespace ddprun::store {

struct Answer {
  proto::Response reply;
  std::optional<std::string> changed;  // the key the request created or changed: its waiters may wake
};

// Applies `q` to `data` and returns the reply. A get/wait/wait_any whose keys are missing answers
// as if its wait were over: `not_found` for a get without a timeout, `timeout` otherwise.
Answer answer(StoreData& data, proto::Request q);

// False only for a get/wait/wait_any whose keys are not there yet.
bool ready(const StoreData& data, const proto::Request& q);

// A get/wait/wait_any with a timeout that cannot be answered yet: the server parks it until a
// write makes it ready or the timeout passes, then answers it with answer().
inline bool must_wait(const StoreData& data, const proto::Request& q) {
  return q.timeout_ms > 0 && !ready(data, q);
}

}  // namespace ddprun::store
