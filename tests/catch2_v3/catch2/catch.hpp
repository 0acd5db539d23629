// Catch2 v3 under the name the tests include, <catch2/catch.hpp> (Catch2 v2's single header).
// tests/CMakeLists.txt puts this directory on the include path only when it builds against Catch2 v3, so the
// tests stay written in v2's spelling (what Debian bookworm ships) and build with either.
#pragma once

#include <string>

#include <catch2/catch_all.hpp>

// v2 has Approx at global scope; v3 only as Catch::Approx.
using Catch::Approx;

namespace Catch::Matchers {
// v2's Contains(string) matches a substring; v3 renamed that ContainsSubstring and made Contains match a
// range's element. These overloads, preferred over v3's template for a string argument, keep v2's meaning
// (the string by value: a const reference would lose to the template's forwarding reference for a temporary).
inline auto Contains(std::string s, CaseSensitive cs = CaseSensitive::Yes) {
  return ContainsSubstring(s, cs);
}
inline auto Contains(const char* s, CaseSensitive cs = CaseSensitive::Yes) {
  return ContainsSubstring(s, cs);
}
}  // namespace Catch::Matchers

namespace Catch {
// v2 also has the string matchers in namespace Catch (Catch::Contains, Catch::StartsWith, ...).
using Matchers::Contains;
using Matchers::EndsWith;
using Matchers::Matches;
using Matchers::StartsWith;
}  // namespace Catch
