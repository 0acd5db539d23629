// libFuzzer target for the failure record that travels between nodes: any bytes in any string
// field must encode and decode (invalid UTF-8 is replaced, never thrown on), and any bytes given to
// the decoder either decode or raise core::Error, nothing else. Seeds: tests/fuzz/corpus/failure/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "core/failure.hpp"

namespace core = ddprun::core;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  // 1. As a record: the input's bytes, split at NULs, become the string fields.
  core::Failure f;
  std::string_view rest = in;
  auto next = [&rest] {
    const auto cut = rest.find('\0');
    std::string piece(rest.substr(0, cut));
    rest = cut == std::string_view::npos ? std::string_view{} : rest.substr(cut + 1);
    return piece;
  };
  f.host = next();
  f.reason = next();
  f.error_message = next();
  f.traceback = next();
  while (!rest.empty() && f.stderr_tail.size() < 64) f.stderr_tail.push_back(next());
  f.exit_code = static_cast<int>(size % 256);
  f.rank = static_cast<int>(size % 7) - 1;
  f.time = core::FailureTime(std::chrono::microseconds(static_cast<long long>(size) * 1'000'003));
  f.hang = size % 2 == 1;
  for (std::size_t i = 0; i < size % 5; ++i)
    f.silent.push_back({static_cast<int>(i), 0.25 * static_cast<double>(size)});
  const core::Failure g = core::decode_failure(core::encode_failure(f));
  if (g.exit_code != f.exit_code || g.rank != f.rank || g.time != f.time ||
      g.stderr_tail.size() != f.stderr_tail.size() || g.hang != f.hang ||
      g.silent.size() != f.silent.size()) {
    std::abort();  // the numbers and the shape must survive whatever the strings hold
  }
  // 2. As wire text from another node.
  try {
    (void)core::decode_failure(in);
  } catch (const core::Error&) {
  }
  return 0;
}
