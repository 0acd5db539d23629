// `ddprun --version`'s text: the version line, then each optional library and whether it was found.
#include <catch2/catch.hpp>

#include "launcher/version.hpp"

using ddprun::launcher::OptionalPart;
using ddprun::launcher::version_text;

TEST_CASE("version text: one aligned line per optional library, found or not", "[version]") {
  CHECK(version_text("ddprun 1.2.3 (x)", {}) == "ddprun 1.2.3 (x)");
  const std::vector<OptionalPart> parts = {
      {"MUNGE auth (--rdzv-auth munge)", "libmunge.so.2", true},
      {"CPU binding (--cpu-bind)", "/opt/hwloc/lib/libhwloc.so.15", false}};
  CHECK(version_text("ddprun 1.2.3 (x)", parts) ==
        "ddprun 1.2.3 (x)\n"
        "optional libraries (loaded at run time when present):\n"
        "  MUNGE auth (--rdzv-auth munge)  libmunge.so.2 found\n"
        "  CPU binding (--cpu-bind)        /opt/hwloc/lib/libhwloc.so.15 not found");
}

TEST_CASE("version line: version, compiler, architecture and the glibc it needs at least", "[version]") {
  const std::string line = ddprun::launcher::version_line();
  CHECK_THAT(line, Catch::StartsWith("ddprun ") && Catch::Contains(" with ") && Catch::Contains("glibc 2.") &&
                       Catch::Contains(" or later)"));
#if defined(__x86_64__)
  CHECK_THAT(line, Catch::Contains(", x86_64, "));
#endif
}
