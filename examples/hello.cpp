// Minimal worker: prints what the launcher gave it. Used by the demo before the trainer and in tests.
#include <unistd.h>
#include <cstdio>
#include <cstdlib>

static const char* env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

int main() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::printf("hello from rank %s/%s (local %s/%s, node %s) on %s, master %s:%s\n", env_or("RANK", "?"),
              env_or("WORLD_SIZE", "?"), env_or("LOCAL_RANK", "?"), env_or("LOCAL_WORLD_SIZE", "?"),
              env_or("GROUP_RANK", "?"), host, env_or("MASTER_ADDR", "?"), env_or("MASTER_PORT", "?"));
  return 0;
}
