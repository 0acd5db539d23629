#pragma once
// `ddprun --version`: the version and build, and which optional libraries this machine offers (they are
// loaded at run time, so one binary runs with or without them: docs/install.md, "Optional libraries").
#include <string>
#include <vector>

namespace ddprun::launcher {

// One optional library, as found on this machine.
struct OptionalPart {
  std::string feature;  // what it enables: "MUNGE auth (--rdzv-auth munge)"
  std::string library;  // what was loaded, or what was looked for
  bool found = false;
};

// The text --version prints: `first_line`, then one line per part (no newline at the end). Pure.
std::string version_text(const std::string& first_line, const std::vector<OptionalPart>& parts);

// The version line: version, git revision, build date, compiler (and toolchain), architecture, glibc floor.
std::string version_line();

// version_text over version_line() and this machine's optional libraries (loads them to find out).
std::string version_string();

}  // namespace ddprun::launcher
