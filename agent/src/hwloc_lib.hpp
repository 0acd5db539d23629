#pragma once
// libhwloc.so.15 (hwloc 2.x), loaded at run time (dlopen) on first use rather than linked, so that ddprun
// starts where hwloc is missing and only --cpu-bind then fails, naming it. hwloc.h gives the types and the
// functions' signatures; the calls go through the pointers below. hwloc's inline helpers (which would call
// the library's symbols directly) are not used: the few needed are rewritten here over the loaded functions.
#include <hwloc.h>

#include "agent/topology.hpp"

namespace ddprun::agent::hwloc {

struct Api {
  decltype(&hwloc_get_api_version) get_api_version = nullptr;
  decltype(&hwloc_topology_init) topology_init = nullptr;
  decltype(&hwloc_topology_destroy) topology_destroy = nullptr;
  decltype(&hwloc_topology_load) topology_load = nullptr;
  decltype(&hwloc_topology_set_io_types_filter) set_io_types_filter = nullptr;
  decltype(&hwloc_topology_set_synthetic) set_synthetic = nullptr;
  decltype(&hwloc_topology_set_xmlbuffer) set_xmlbuffer = nullptr;
  decltype(&hwloc_get_type_depth) get_type_depth = nullptr;
  decltype(&hwloc_get_nbobjs_by_depth) get_nbobjs_by_depth = nullptr;
  decltype(&hwloc_get_obj_by_depth) get_obj_by_depth = nullptr;
  decltype(&hwloc_bitmap_first) bitmap_first = nullptr;
  decltype(&hwloc_bitmap_next) bitmap_next = nullptr;
  decltype(&hwloc_bitmap_iszero) bitmap_iszero = nullptr;

  // hwloc.h's inline helpers of the same names, over the pointers above.
  int nbobjs_by_type(hwloc_topology_t t, hwloc_obj_type_t type) const;
  hwloc_obj_t next_obj_by_type(hwloc_topology_t t, hwloc_obj_type_t type, hwloc_obj_t prev) const;
  static hwloc_obj_t non_io_ancestor(hwloc_obj_t obj);
  static const char* info_by_name(hwloc_obj_t obj, const char* name);
};

// The loaded library; throws agent::Error (exit 2) with hwloc_library()'s message when it is missing or is
// not hwloc 2.x.
const Api& api();

}  // namespace ddprun::agent::hwloc
