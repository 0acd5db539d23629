#include "core/slurm_text.hpp"

#include <algorithm>

namespace ddprun::core {

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> out;
  for (std::size_t start = 0; start < text.size();) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::optional<std::string_view> scontrol_field(std::string_view text, std::string_view key) {
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t end = std::min(text.find_first_of(" \n", pos), text.size());
    const std::string_view token = text.substr(pos, end - pos);
    if (token.size() > key.size() && token.substr(0, key.size()) == key && token[key.size()] == '=') {
      return token.substr(key.size() + 1);
    }
    pos = end + 1;
  }
  return std::nullopt;
}

}  // namespace ddprun::core
