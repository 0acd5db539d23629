#pragma once
// The observability side of a Rendezvous (docs/observe.md): what the status, stacks and metrics threads
// read beside the main thread's calls. One lock for all of it; each call holds it only to copy in or out.
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "store_names.hpp"

namespace ddprun::rdzv {

class StatusBoard {
 public:
  // The store this agent serves (node 0, a failover's survivor), or nullptr: set by the main thread as it
  // starts or stops serving (follow), read by try_write and local_status. Shared: a call in flight keeps
  // the one it read (stopped, it answers with an error) until it returns.
  void serve(std::shared_ptr<StoreServer> server);
  std::shared_ptr<StoreServer> server() const;
  // This agent's last record under `key` (try_write with WriteOptions::keep), for local_status.
  void keep(const std::string& key, const std::string& value);
  std::optional<std::string> kept(const std::string& key) const;
  // `ddprun stacks`' last request as the watch received it (stacks_request); forgotten when a new
  // attempt's watch starts (the store pushes a request still waiting again).
  void keep_stacks_request(std::string value);
  std::optional<std::string> stacks_request() const;
  void forget_stacks_request();

 private:
  mutable std::mutex mu_;
  std::shared_ptr<StoreServer> server_;
  std::map<std::string, std::string> published_;  // by key
  std::optional<std::string> stacks_request_;
};

}  // namespace ddprun::rdzv
