// Serves ddprun's workers' store (store/c10d_server.hpp) on 127.0.0.1 for the differential tests:
// prints its port, then serves until its standard input closes.
//   c10d_serve [--legacy 2.1] [--host ADDR]
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "store/c10d_server.hpp"
#include "store/error.hpp"

int main(int argc, char** argv) {
  ddprun::store::C10dServerOptions o;
  o.hosts = {"127.0.0.1"};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--legacy") == 0 && std::strcmp(argv[i + 1], "2.1") == 0) {
      o.legacy = ddprun::store::c10d::Layout::v21;
    } else if (std::strcmp(argv[i], "--host") == 0) {
      o.hosts = {argv[i + 1]};
    } else {
      std::fprintf(stderr, "usage: c10d_serve [--legacy 2.1] [--host ADDR]\n");
      return 2;
    }
  }
  try {
    ddprun::store::C10dServer server(o);
    std::printf("%u\n", static_cast<unsigned>(server.port()));
    std::fflush(stdout);
    char buf[256];
    while (::read(0, buf, sizeof buf) > 0) {
    }
  } catch (const ddprun::store::Error& e) {
    std::fprintf(stderr, "c10d_serve: %s\n", e.what());
    return 1;
  }
  return 0;
}
