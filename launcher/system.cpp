#include "launcher/system.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string_view>

extern char** environ;

namespace ddprun::launcher {

EnvSnapshot snapshot_environ() {
  EnvSnapshot env;
  for (char** p = environ; p != nullptr && *p != nullptr; ++p) {
    std::string kv(*p);
    auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

SystemInfo probe_system() {
  SystemInfo s;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) s.hostname = host;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    s.cpu_count = CPU_COUNT(&set);
  } else {
    s.cpu_count = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  }
  // /dev/nvidiaN exist on GPU nodes even without nvidia-smi; the last resort when nothing else says.
  std::error_code ec;
  std::vector<int> ids;
  for (const auto& entry : std::filesystem::directory_iterator("/dev", ec)) {
    const std::string name = entry.path().filename().string();
    constexpr std::string_view kPrefix = "nvidia";
    if (name.size() <= kPrefix.size() || name.compare(0, kPrefix.size(), kPrefix) != 0) continue;
    const std::string num = name.substr(kPrefix.size());
    if (num.find_first_not_of("0123456789") != std::string::npos || num.size() > 4) continue;
    ids.push_back(std::stoi(num));
  }
  std::sort(ids.begin(), ids.end());
  for (int id : ids) s.probed_gpus.push_back(std::to_string(id));
  return s;
}

}  // namespace ddprun::launcher
