// Replays saved inputs through a libFuzzer target without libFuzzer, so the corpus and the
// regression inputs run as ordinary tests with g++ (and under ASan/UBSan in the asan preset).
// Usage: <target>_replay DIR_OR_FILE...   Each argument must exist; files whose names start with
// '.' (.gitkeep) are skipped; replaying nothing at all is a failure, so a wrong path cannot pass.
// A failing input aborts the process; the last "replay:" line names it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace fs = std::filesystem;

namespace {

bool replay(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "replay: cannot read %s\n", file.c_str());
    return false;
  }
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::printf("replay: %s (%zu bytes)\n", file.c_str(), bytes.size());
  std::fflush(stdout);
  // A zero-size vector may have a null data(); libFuzzer always passes a valid pointer.
  static const std::uint8_t empty = 0;
  const auto* data = bytes.empty() ? &empty : reinterpret_cast<const std::uint8_t*>(bytes.data());
  (void)LLVMFuzzerTestOneInput(data, bytes.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR_OR_FILE...\n", argv[0]);
    return 2;
  }
  std::size_t count = 0;
  bool ok = true;
  for (int i = 1; i < argc; ++i) {
    const fs::path arg(argv[i]);
    std::error_code ec;
    if (fs::is_regular_file(arg, ec)) {
      ok = replay(arg) && ok;
      ++count;
      continue;
    }
    if (!fs::is_directory(arg, ec)) {
      std::fprintf(stderr, "replay: %s is neither a file nor a directory\n", argv[i]);
      return 2;
    }
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(arg)) {
      if (entry.is_regular_file() && entry.path().filename().string().front() != '.') {
        files.push_back(entry.path());
      }
    }
    std::sort(files.begin(), files.end());  // a stable order makes failures easy to compare
    for (const auto& f : files) {
      ok = replay(f) && ok;
      ++count;
    }
  }
  if (count == 0) {
    std::fprintf(stderr, "replay: no inputs found\n");
    return 2;
  }
  std::printf("replay: %zu inputs%s\n", count, ok ? ", all passed" : ", some unreadable");
  return ok ? 0 : 1;
}
