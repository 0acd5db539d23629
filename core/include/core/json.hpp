#pragma once
// The one JSON encoding policy: every dump goes through here. Strings from workers, arguments and
// the environment may hold any bytes; invalid UTF-8 is replaced (U+FFFD), never thrown on.
#include <string>

#include <nlohmann/json.hpp>

namespace ddprun::core {

inline std::string dump_json(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace ddprun::core
