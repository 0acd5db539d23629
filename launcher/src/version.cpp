#include "launcher/version.hpp"

#include <algorithm>
#if __has_include(<features.h>)
#include <features.h>  // __GLIBC__, __GLIBC_MINOR__: the glibc these headers are (zig's: the target's)
#endif

#include <fmt/format.h>

#include "agent/topology.hpp"
#include "store/auth.hpp"

#ifndef DDPRUN_TOOLCHAIN
#define DDPRUN_TOOLCHAIN ""
#endif

namespace ddprun::launcher {

std::string version_text(const std::string& first_line, const std::vector<OptionalPart>& parts) {
  if (parts.empty()) return first_line;
  std::string out = first_line + "\n";
  std::size_t width = 0;
  for (const auto& p : parts) width = std::max(width, p.feature.size());
  out += "optional libraries (loaded at run time when present):\n";
  for (const auto& p : parts) {
    out += fmt::format("  {:<{}}  {} {}\n", p.feature, width, p.library, p.found ? "found" : "not found");
  }
  out.pop_back();  // the caller ends the last line
  return out;
}

std::string version_line() {
#if defined(__clang__)
  const std::string compiler = fmt::format("clang {}.{}", __clang_major__, __clang_minor__);
#else
  const std::string compiler = fmt::format("g++ {}.{}", __GNUC__, __GNUC_MINOR__);
#endif
  const std::string toolchain =
      *DDPRUN_TOOLCHAIN ? fmt::format("{} ({})", DDPRUN_TOOLCHAIN, compiler) : compiler;
#if defined(__x86_64__)
  const char* arch = "x86_64";
#elif defined(__aarch64__)
  const char* arch = "aarch64";
#else
  const char* arch = "other";
#endif
#if defined(__GLIBC__)
  const std::string libc = fmt::format("glibc {}.{} or later", __GLIBC__, __GLIBC_MINOR__);
#else
  const std::string libc = "not glibc";
#endif
#if defined(DDPRUN_BUILD_DATE)
  const char* date = DDPRUN_BUILD_DATE;  // the portable build's: its commit's date, for a reproducible binary
#else
  const char* date = __DATE__;
#endif
  return fmt::format("ddprun {} (git {}, built {} with {}, {}, {})", DDPRUN_VERSION, DDPRUN_GIT_REV, date,
                     toolchain, arch, libc);
}

std::string version_string() {
  const auto munge = store::auth::munge_library();
  const auto crypto = store::auth::crypto_library();
  const auto hwloc = agent::hwloc_library();
  return version_text(version_line(), {{"MUNGE auth (--rdzv-auth munge)", munge.name, munge.found},
                                       {"token auth (HMAC-SHA256)", crypto.name, crypto.found},
                                       {"CPU binding (--cpu-bind)", hwloc.name, hwloc.found}});
}

}  // namespace ddprun::launcher
