#pragma once
// The one JSON encoding policy: every dump goes through here. Strings from workers, arguments and
// the environment may hold any bytes; invalid UTF-8 is replaced (U+FFFD), never thrown on.
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddprun::core {

inline std::string dump_json(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Integers from other nodes' records. json's get<int>() casts whatever number it holds, and casting
// a float out of range is undefined behaviour; a float, a bool or an integer out of T's range is a
// type_error here, which every decoder already turns into its "malformed" error.
template <class T>
T json_int(const nlohmann::json& v) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  const auto fits = [&]() -> bool {
    if (v.is_number_unsigned()) {
      return v.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<T>::max());
    }
    if (!v.is_number_integer()) return false;
    const auto i = v.get<std::int64_t>();
    if constexpr (std::is_unsigned_v<T>) {
      return i >= 0 && static_cast<std::uint64_t>(i) <= std::numeric_limits<T>::max();
    } else {
      return i >= std::numeric_limits<T>::min() && i <= std::numeric_limits<T>::max();
    }
  };
  if (!fits()) {
    throw nlohmann::json::type_error::create(
        302,
        "expected an integer from " + std::to_string(std::numeric_limits<T>::min()) + " to " +
            std::to_string(std::numeric_limits<T>::max()) + ", got " + dump_json(v),
        &v);
  }
  return v.get<T>();
}

template <class T>
T json_int(const nlohmann::json& j, const char* key) {
  return json_int<T>(j.at(key));
}

// An optional integer field: the fallback when absent or null.
template <class T>
T json_int_or(const nlohmann::json& j, const char* key, T fallback) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? fallback : json_int<T>(*it);
}

template <class T>
std::vector<T> json_ints(const nlohmann::json& array) {
  if (!array.is_array()) {
    throw nlohmann::json::type_error::create(302, "expected an array of integers, got " + dump_json(array),
                                             &array);
  }
  std::vector<T> out;
  out.reserve(array.size());
  for (const auto& v : array) out.push_back(json_int<T>(v));
  return out;
}

}  // namespace ddprun::core
