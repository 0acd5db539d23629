// libFuzzer target for the hostlist parser: no input may crash it or make it run away (errors are
// core::Error), and whatever it accepts must survive compress -> expand unchanged.
// Seeds: tests/fuzz/corpus/hostlist/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "core/hostlist.hpp"

namespace core = ddprun::core;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);

  try {
    (void)core::parse_count_list(input);
  } catch (const core::Error&) {
  }

  std::vector<std::string> hosts;
  try {
    hosts = core::expand_hostlist(input);
  } catch (const core::Error&) {
    return 0;
  }
  // Every expanded host is a plain name, so compressing and expanding again must give the same list.
  try {
    if (core::expand_hostlist(core::compress_hostlist(hosts)) != hosts) std::abort();
  } catch (const core::Error&) {
    std::abort();
  }
  return 0;
}
