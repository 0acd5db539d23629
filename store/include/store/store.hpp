#pragma once
// The key-value store the agents meet at. `Store` is the interface; `MemoryStore` is the in-process
// implementation (unit tests); `PrefixStore` namespaces another store (one namespace per restart
// attempt); `TcpStore` (client.hpp) talks to a `StoreServer` (server.hpp).
//
// Semantics shared by every implementation (and by the server, through StoreData):
// - values are byte strings; `add` keeps its counter as a decimal string (missing key = 0);
// - `compare_set(key, expected, desired)`: if the key holds `expected` (a missing key counts as
//   holding "" only when `expected` is empty), it becomes `desired`; returns the value the key
//   holds afterwards, so the caller learns whether it won and, if not, what is there;
// - `wait`/`wait_any`/`get` with a timeout block until keys exist: no polling, waiters are woken
//   by the write that creates or changes the key.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ddprun::store {

using Millis = std::chrono::milliseconds;

// Longest wait any store honours (about 30 days): keeps deadline arithmetic from overflowing.
inline constexpr Millis kMaxWait{30LL * 24 * 3600 * 1000};
inline Millis clamp_timeout(Millis t) {
  return t < Millis{0} ? Millis{0} : (t > kMaxWait ? kMaxWait : t);
}

class Store {
 public:
  virtual ~Store() = default;

  virtual void set(const std::string& key, const std::string& value) = 0;
  // Waits up to `timeout` for the key (0 = do not wait); nullopt when it is still missing.
  virtual std::optional<std::string> get(const std::string& key, Millis timeout) = 0;
  // Atomically adds `delta` to the counter at `key`; returns the new value.
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;
  virtual std::string compare_set(const std::string& key, const std::string& expected,
                                  const std::string& desired) = 0;
  // True when every key exists.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // True when the key existed.
  virtual bool del(const std::string& key) = 0;
  virtual std::int64_t num_keys() = 0;
  // Blocks until every key exists; false on timeout.
  virtual bool wait(const std::vector<std::string>& keys, Millis timeout) = 0;
  // The long poll: blocks until at least one key exists; returns the index of the first such key
  // in `keys`, or nullopt on timeout. This is how agents learn at once that something happened.
  virtual std::optional<std::size_t> wait_any(const std::vector<std::string>& keys, Millis timeout) = 0;
};

// The data model without locking or waiting: the semantics every store shares. Not thread-safe.
class StoreData {
 public:
  void set(const std::string& key, std::string value) { data_[key] = std::move(value); }
  const std::string* find(const std::string& key) const;
  // Throws Error(usage) when the key holds something that is not a decimal integer.
  std::int64_t add(const std::string& key, std::int64_t delta);
  // Returns {value afterwards, whether the key was written}.
  std::pair<std::string, bool> compare_set(const std::string& key, const std::string& expected,
                                           const std::string& desired);
  bool check(const std::vector<std::string>& keys) const;
  bool del(const std::string& key) { return data_.erase(key) > 0; }
  std::int64_t num_keys() const { return static_cast<std::int64_t>(data_.size()); }
  std::optional<std::size_t> first_present(const std::vector<std::string>& keys) const;

 private:
  std::map<std::string, std::string> data_;
};

// Thread-safe in-memory store.
class MemoryStore final : public Store {
 public:
  void set(const std::string& key, const std::string& value) override;
  std::optional<std::string> get(const std::string& key, Millis timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  bool del(const std::string& key) override;
  std::int64_t num_keys() override;
  bool wait(const std::vector<std::string>& keys, Millis timeout) override;
  std::optional<std::size_t> wait_any(const std::vector<std::string>& keys, Millis timeout) override;

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  StoreData data_;
};

// Prepends a fixed prefix (e.g. "/attempt_1/") to every key. num_keys counts the whole store.
class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> inner)
      : prefix_(std::move(prefix)), inner_(std::move(inner)) {}
  const std::string& prefix() const { return prefix_; }
  Store& inner() { return *inner_; }

  void set(const std::string& key, const std::string& value) override;
  std::optional<std::string> get(const std::string& key, Millis timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  bool del(const std::string& key) override;
  std::int64_t num_keys() override;
  bool wait(const std::vector<std::string>& keys, Millis timeout) override;
  std::optional<std::size_t> wait_any(const std::vector<std::string>& keys, Millis timeout) override;

 private:
  std::vector<std::string> prefixed(const std::vector<std::string>& keys) const;
  std::string prefix_;
  std::shared_ptr<Store> inner_;
};

}  // namespace ddprun::store
