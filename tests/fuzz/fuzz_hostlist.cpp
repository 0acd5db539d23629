// libFuzzer target for the hostlist parser: no input may crash it or make it run away (errors are
// launcher::Error), and whatever it accepts must survive compress -> expand unchanged.
// Seeds: tests/fuzz/corpus/hostlist/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/hostlist.hpp"

namespace launcher = ddprun::launcher;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);

  try {
    (void)launcher::parse_count_list(input);
  } catch (const launcher::Error&) {
  }

  std::vector<std::string> hosts;
  try {
    hosts = launcher::expand_hostlist(input);
  } catch (const launcher::Error&) {
    return 0;
  }
  // Every expanded host is a plain name, so compressing and expanding again must give the same list.
  try {
    if (launcher::expand_hostlist(launcher::compress_hostlist(hosts)) != hosts) std::abort();
  } catch (const launcher::Error&) {
    std::abort();
  }
  return 0;
}
