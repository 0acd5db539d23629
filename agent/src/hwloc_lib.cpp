#include "hwloc_lib.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "agent/error.hpp"

namespace ddprun::agent {
namespace hwloc {
namespace {

struct Loaded {
  Api api;
  std::string name;   // what loaded
  std::string tried;  // what was tried: DDPRUN_LIBHWLOC's value, else the soname
  std::string error;  // the loader's message when it did not
};

template <class F>
bool bind(void* handle, const char* symbol, F& out, std::string& error) {
  // POSIX guarantees that a dlsym result converts to a function pointer.
  out = reinterpret_cast<F>(::dlsym(handle, symbol));
  if (out == nullptr && error.empty()) error = fmt::format("it has no {}: not hwloc 2.x", symbol);
  return out != nullptr;
}

Loaded load() {
  Loaded l;
  const char* env = std::getenv("DDPRUN_LIBHWLOC");
  l.tried = env != nullptr && *env != '\0' ? env : "libhwloc.so.15";
  // RTLD_GLOBAL: hwloc's own plugins (hwloc_pci, ...) resolve the library's symbols globally.
  void* h = ::dlopen(l.tried.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (h == nullptr) {
    const char* why = ::dlerror();
    l.error = why != nullptr ? why : "cannot be loaded";
    return l;
  }
  Api& a = l.api;
  std::string& e = l.error;
  bind(h, "hwloc_get_api_version", a.get_api_version, e);
  bind(h, "hwloc_topology_init", a.topology_init, e);
  bind(h, "hwloc_topology_destroy", a.topology_destroy, e);
  bind(h, "hwloc_topology_load", a.topology_load, e);
  bind(h, "hwloc_topology_set_io_types_filter", a.set_io_types_filter, e);
  bind(h, "hwloc_topology_set_synthetic", a.set_synthetic, e);
  bind(h, "hwloc_topology_set_xmlbuffer", a.set_xmlbuffer, e);
  bind(h, "hwloc_get_type_depth", a.get_type_depth, e);
  bind(h, "hwloc_get_nbobjs_by_depth", a.get_nbobjs_by_depth, e);
  bind(h, "hwloc_get_obj_by_depth", a.get_obj_by_depth, e);
  bind(h, "hwloc_bitmap_first", a.bitmap_first, e);
  bind(h, "hwloc_bitmap_next", a.bitmap_next, e);
  bind(h, "hwloc_bitmap_iszero", a.bitmap_iszero, e);
  // The ABI of hwloc.h is that of its major version (hwloc's own rule: compare the upper 16 bits).
  if (e.empty() && (a.get_api_version() >> 16) != (HWLOC_API_VERSION >> 16)) {
    e = fmt::format("its API version is {:#x}, not hwloc 2.x", a.get_api_version());
  }
  if (e.empty()) l.name = l.tried;
  return l;
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

}  // namespace

int Api::nbobjs_by_type(hwloc_topology_t t, hwloc_obj_type_t type) const {
  const int depth = get_type_depth(t, type);
  if (depth == HWLOC_TYPE_DEPTH_UNKNOWN) return 0;
  if (depth == HWLOC_TYPE_DEPTH_MULTIPLE) return -1;
  return static_cast<int>(get_nbobjs_by_depth(t, depth));
}

hwloc_obj_t Api::next_obj_by_type(hwloc_topology_t t, hwloc_obj_type_t type, hwloc_obj_t prev) const {
  const int depth = get_type_depth(t, type);
  if (depth == HWLOC_TYPE_DEPTH_UNKNOWN || depth == HWLOC_TYPE_DEPTH_MULTIPLE) return nullptr;
  if (prev == nullptr) return get_obj_by_depth(t, depth, 0);
  return prev->depth == depth ? prev->next_cousin : nullptr;
}

hwloc_obj_t Api::non_io_ancestor(hwloc_obj_t obj) {
  // I/O and Misc objects have no cpuset; the first ancestor with one is where the device is attached.
  hwloc_obj_t a = obj;
  while (a != nullptr && a->cpuset == nullptr) a = a->parent;
  return a;
}

const char* Api::info_by_name(hwloc_obj_t obj, const char* name) {
  for (unsigned i = 0; i < obj->infos_count; ++i) {
    if (obj->infos[i].name != nullptr && std::strcmp(obj->infos[i].name, name) == 0)
      return obj->infos[i].value;
  }
  return nullptr;
}

const Api& api() {
  const Loaded& l = loaded();
  if (l.name.empty()) throw Error(hwloc_library().error, kUsage);
  return l.api;
}

}  // namespace hwloc

HwlocLibrary hwloc_library() {
  const auto& l = hwloc::loaded();
  if (!l.name.empty()) return {l.name, true, {}};
  return {l.tried, false,
          fmt::format("--cpu-bind needs {} (hwloc 2.x), which could not be loaded ({}); install hwloc (RHEL: "
                      "hwloc-libs, SLES/Debian/Ubuntu: libhwloc15), set DDPRUN_LIBHWLOC to its path, or drop "
                      "--cpu-bind",
                      l.tried, l.error)};
}

}  // namespace ddprun::agent
