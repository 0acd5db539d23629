#pragma once
// One pattern for an enum's names: a constexpr table of {value, name} pairs beside the enum, and the
// two lookups every to_string / parse of the core and the agent is made of. A table lists every
// value once (tests/unit/core/test_enum_names.cpp checks each table: names unique, both ways agree).
#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace ddprun::core {

template <class E>
struct EnumName {
  E value;
  const char* name;
};

// The name of `v` in `table`; `fallback` for a value outside it (an integer cast to the enum).
template <class E, std::size_t N>
constexpr const char* name_of(const std::array<EnumName<E>, N>& table, E v, const char* fallback) {
  for (const auto& e : table) {
    if (e.value == v) return e.name;
  }
  return fallback;
}

// The value named `name` in `table`; nullopt when no entry has that name.
template <class E, std::size_t N>
constexpr std::optional<E> value_of(const std::array<EnumName<E>, N>& table, std::string_view name) {
  for (const auto& e : table) {
    if (name == e.name) return e.value;
  }
  return std::nullopt;
}

}  // namespace ddprun::core
