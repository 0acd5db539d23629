#pragma once
// Reading the text Slurm's commands print (squeue, scontrol show ... -o). Pure.
#include <optional>
#include <string_view>
#include <vector>

namespace ddprun::core {

// The lines of a command's output, without their '\n'; a final '\n' starts no further line, an empty
// line in between is kept. The views point into `text`.
std::vector<std::string_view> split_lines(std::string_view text);

// The value of `Key=Value` in scontrol's output, whose fields are separated by spaces and newlines: the
// first field named `key`, its value up to the next separator (possibly empty); nullopt: no such field.
// The view points into `text`.
std::optional<std::string_view> scontrol_field(std::string_view text, std::string_view key);

}  // namespace ddprun::core
