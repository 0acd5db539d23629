#include "launcher/system.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <regex>

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
  static const std::regex kDev("nvidia([0-9]+)");
  for (const auto& entry : std::filesystem::directory_iterator("/dev", ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, m, kDev)) ids.push_back(std::stoi(m[1].str()));
  }
  std::sort(ids.begin(), ids.end());
  for (int id : ids) s.probed_gpus.push_back(std::to_string(id));
  return s;
}

}  // namespace ddprun::launcher
