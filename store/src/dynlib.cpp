#include "dynlib.hpp"

#include <dlfcn.h>

#include <cstdlib>

namespace ddprun::store::dynlib {

std::vector<std::string> candidates(const char* env_value, std::initializer_list<const char*> defaults) {
  if (env_value != nullptr && *env_value != '\0') return {env_value};
  return {defaults.begin(), defaults.end()};
}

Loaded open(const std::vector<std::string>& names) {
  Loaded lib;
  for (const auto& name : names) {
    lib.handle = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib.handle != nullptr) {
      lib.name = name;
      lib.error.clear();
      return lib;
    }
    const char* why = ::dlerror();
    if (!lib.error.empty()) lib.error += "; ";
    lib.error += why != nullptr ? why : name + ": cannot be loaded";
  }
  return lib;
}

void* lookup(Loaded& lib, const char* symbol) {
  if (lib.handle == nullptr || lib.name.empty()) return nullptr;
  void* p = ::dlsym(lib.handle, symbol);
  if (p == nullptr) {
    lib.error = lib.name + " has no " + symbol + " (not the expected library)";
    lib.name.clear();
  }
  return p;
}

}  // namespace ddprun::store::dynlib
