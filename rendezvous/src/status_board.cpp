// The observability side of a Rendezvous: status_board.hpp.
#include "status_board.hpp"

#include <utility>

namespace ddprun::rdzv {

void StatusBoard::serve(std::shared_ptr<StoreServer> server) {
  std::lock_guard lk(mu_);
  server_ = std::move(server);
}

std::shared_ptr<StoreServer> StatusBoard::server() const {
  std::lock_guard lk(mu_);
  return server_;
}

void StatusBoard::keep(const std::string& key, const std::string& value) {
  std::lock_guard lk(mu_);
  published_[key] = value;
}

std::optional<std::string> StatusBoard::kept(const std::string& key) const {
  std::lock_guard lk(mu_);
  const auto it = published_.find(key);
  if (it == published_.end()) return std::nullopt;
  return it->second;
}

void StatusBoard::keep_stacks_request(std::string value) {
  std::lock_guard lk(mu_);
  stacks_request_ = std::move(value);
}

std::optional<std::string> StatusBoard::stacks_request() const {
  std::lock_guard lk(mu_);
  return stacks_request_;
}

void StatusBoard::forget_stacks_request() {
  std::lock_guard lk(mu_);
  stacks_request_.reset();
}

}  // namespace ddprun::rdzv
