#include "store/store.hpp"

#include <charconv>

#include <fmt/core.h>

#include "store/error.hpp"

namespace ddprun::store {

const std::string* StoreData::find(const std::string& key) const {
  auto it = data_.find(key);
  return it == data_.end() ? nullptr : &it->second;
}

std::int64_t StoreData::add(const std::string& key, std::int64_t delta) {
  std::int64_t current = 0;
  auto it = data_.find(key);
  if (it != data_.end()) {
    const std::string& s = it->second;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), current);
    if (ec != std::errc{} || end != s.data() + s.size()) {
      throw Error(Error::Kind::usage,
                  fmt::format("add on key '{}': it holds a value that is not an integer", key), "add", {},
                  key);
    }
  }
  const std::int64_t next = current + delta;
  data_[key] = std::to_string(next);
  return next;
}

std::pair<std::string, bool> StoreData::compare_set(const std::string& key, const std::string& expected,
                                                    const std::string& desired) {
  auto it = data_.find(key);
  if (it == data_.end()) {
    if (expected.empty()) {
      data_[key] = desired;
      return {desired, true};
    }
    return {std::string{}, false};
  }
  if (it->second == expected) {
    it->second = desired;
    return {desired, true};
  }
  return {it->second, false};
}

bool StoreData::check(const std::vector<std::string>& keys) const {
  for (const auto& k : keys) {
    if (!data_.contains(k)) return false;
  }
  return true;
}

std::optional<std::size_t> StoreData::first_present(const std::vector<std::string>& keys) const {
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (data_.contains(keys[i])) return i;
  }
  return std::nullopt;
}

// ---- MemoryStore

void MemoryStore::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard lk(mu_);
    data_.set(key, value);
  }
  changed_.notify_all();
}

std::optional<std::string> MemoryStore::get(const std::string& key, Millis timeout) {
  std::unique_lock lk(mu_);
  changed_.wait_for(lk, clamp_timeout(timeout), [&] { return data_.find(key) != nullptr; });
  if (const auto* v = data_.find(key)) return *v;
  return std::nullopt;
}

std::int64_t MemoryStore::add(const std::string& key, std::int64_t delta) {
  std::int64_t v = 0;
  {
    std::lock_guard lk(mu_);
    v = data_.add(key, delta);
  }
  changed_.notify_all();
  return v;
}

std::string MemoryStore::compare_set(const std::string& key, const std::string& expected,
                                     const std::string& desired) {
  std::pair<std::string, bool> r;
  {
    std::lock_guard lk(mu_);
    r = data_.compare_set(key, expected, desired);
  }
  if (r.second) changed_.notify_all();
  return r.first;
}

bool MemoryStore::check(const std::vector<std::string>& keys) {
  std::lock_guard lk(mu_);
  return data_.check(keys);
}

bool MemoryStore::del(const std::string& key) {
  std::lock_guard lk(mu_);
  return data_.del(key);
}

std::int64_t MemoryStore::num_keys() {
  std::lock_guard lk(mu_);
  return data_.num_keys();
}

bool MemoryStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  std::unique_lock lk(mu_);
  return changed_.wait_for(lk, clamp_timeout(timeout), [&] { return data_.check(keys); });
}

std::optional<std::size_t> MemoryStore::wait_any(const std::vector<std::string>& keys, Millis timeout) {
  std::unique_lock lk(mu_);
  changed_.wait_for(lk, clamp_timeout(timeout), [&] { return data_.first_present(keys).has_value(); });
  return data_.first_present(keys);
}

// ---- PrefixStore

std::vector<std::string> PrefixStore::prefixed(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(prefix_ + k);
  return out;
}

void PrefixStore::set(const std::string& key, const std::string& value) {
  inner_->set(prefix_ + key, value);
}
std::optional<std::string> PrefixStore::get(const std::string& key, Millis timeout) {
  return inner_->get(prefix_ + key, timeout);
}
std::int64_t PrefixStore::add(const std::string& key, std::int64_t delta) {
  return inner_->add(prefix_ + key, delta);
}
std::string PrefixStore::compare_set(const std::string& key, const std::string& expected,
                                     const std::string& desired) {
  return inner_->compare_set(prefix_ + key, expected, desired);
}
bool PrefixStore::check(const std::vector<std::string>& keys) {
  return inner_->check(prefixed(keys));
}
bool PrefixStore::del(const std::string& key) {
  return inner_->del(prefix_ + key);
}
std::int64_t PrefixStore::num_keys() {
  return inner_->num_keys();
}
bool PrefixStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  return inner_->wait(prefixed(keys), timeout);
}
std::optional<std::size_t> PrefixStore::wait_any(const std::vector<std::string>& keys, Millis timeout) {
  return inner_->wait_any(prefixed(keys), timeout);
}

}  // namespace ddprun::store
