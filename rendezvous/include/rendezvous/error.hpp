#pragma once
// The rendezvous layer's error. The rendezvous meets most failures in its store (io, timeout,
// protocol, rejected, usage, other_run) and throws those as the store's error; what only a
// rendezvous can fail at, the round (missing nodes, a round closed, a node that could not start),
// is this type. It derives from store::Error, so `catch (const store::Error&)` still sees every
// failure of a rendezvous call, and catching this type picks out the failed round.
#include <string>

#include "store/error.hpp"

namespace ddprun::rdzv {

class Error : public store::Error {
 public:
  // The store's kind of a failed round is `rejected`: node 0 refused this node's round.
  Error(const std::string& message, std::string op = "join", std::string endpoint = {})
      : store::Error(Kind::rejected, message, std::move(op), std::move(endpoint)) {}
};

}  // namespace ddprun::rdzv
