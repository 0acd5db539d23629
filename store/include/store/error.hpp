#pragma once
// The store library's one error type. The message is a complete line for the user; the fields
// say which operation against which endpoint failed, so callers can react without parsing text.
// The kinds are the store's own: what a layer above adds (the rendezvous's failed round) is its own type.
#include <stdexcept>
#include <string>

namespace ddprun::store {

class Error : public std::runtime_error {
 public:
  enum class Kind {
    io,              // connect/read/write failed, connection lost
    timeout,         // a deadline passed
    protocol,        // malformed or unexpected bytes
    rejected,        // the peer refused us (run id, version, duplicate node rank, ...)
    usage,           // bad argument (key too long, ...)
    other_run,       // the endpoint is a store of another run (its run id differs): refused, like rejected
    address_in_use,  // listen: another socket holds the address and port (EADDRINUSE)
  };

  Error(Kind kind, const std::string& message, std::string op = {}, std::string endpoint = {},
        std::string key = {})
      : std::runtime_error(message),
        kind_(kind),
        op_(std::move(op)),
        endpoint_(std::move(endpoint)),
        key_(std::move(key)) {}

  Kind kind() const noexcept { return kind_; }
  const std::string& op() const noexcept { return op_; }
  const std::string& endpoint() const noexcept { return endpoint_; }
  const std::string& key() const noexcept { return key_; }

 private:
  Kind kind_;
  std::string op_;
  std::string endpoint_;
  std::string key_;
};

}  // namespace ddprun::store
