# DDPRUN_PORTABLE=ON: the portable build of `ddprun` alone (no trainer, tests or benchmarks), for glibc 2.28 on
# x86_64 or aarch64, with cmake/zig-toolchain.cmake (docs/install.md, "Building the portable binary";
# docs/architecture.md, "The portable build"). Its only NEEDED libraries are glibc's: libmunge, libhwloc and
# libcrypto are loaded at run time when present, fmt is compiled in (header-only mode), and zig links LLVM's
# libc++ statically. The header-only libraries (Boost.Asio, CLI11, nlohmann/json, fmt, hwloc's headers) come from
# DDPRUN_PORTABLE_HEADERS (this machine's /usr/include: Debian's libboost1.81-dev, libcli11-dev,
# nlohmann-json3-dev, libfmt-dev, libhwloc-dev) through a private include root holding only them: /usr/include
# itself is never on the path, since its glibc headers (2.36) would shadow zig's for 2.28.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang" OR NOT DDPRUN_ZIG)
  message(FATAL_ERROR "DDPRUN_PORTABLE=ON builds with zig: configure with --toolchain cmake/zig-toolchain.cmake "
                      "(or a portable-* preset, or scripts/package.sh)")
endif()
set(BUILD_TESTING OFF CACHE BOOL "Build the tests" FORCE)
set(DDPRUN_BUILD_TRAINER OFF CACHE STRING "ddprun-train, with Torch (libtorch-dev)" FORCE)
set(DDPRUN_PORTABLE_HEADERS /usr/include CACHE PATH
    "Where the portable build takes Boost, CLI11, nlohmann/json, fmt and hwloc's headers from")

set(_root ${CMAKE_BINARY_DIR}/portable-include)
set(_arch_root ${CMAKE_BINARY_DIR}/portable-include-arch)
file(REMOVE_RECURSE ${_root} ${_arch_root})
file(MAKE_DIRECTORY ${_root} ${_arch_root}/hwloc/autogen)
foreach(_h boost CLI nlohmann fmt hwloc hwloc.h)
  if(NOT EXISTS ${DDPRUN_PORTABLE_HEADERS}/${_h})
    message(FATAL_ERROR "portable build: ${DDPRUN_PORTABLE_HEADERS}/${_h} is missing; run scripts/setup.sh (Debian: "
                        "libboost1.81-dev libcli11-dev nlohmann-json3-dev libfmt-dev libhwloc-dev)")
  endif()
  file(CREATE_LINK ${DDPRUN_PORTABLE_HEADERS}/${_h} ${_root}/${_h} SYMBOLIC)
endforeach()
# hwloc's generated config.h: in the multiarch folder on Debian, beside the others elsewhere. It holds no
# architecture's sizes, so the host's serves both targets.
file(GLOB _hwloc_config ${DDPRUN_PORTABLE_HEADERS}/hwloc/autogen/config.h
     ${DDPRUN_PORTABLE_HEADERS}/*-linux-gnu/hwloc/autogen/config.h)
list(GET _hwloc_config 0 _hwloc_config)
file(CREATE_LINK ${_hwloc_config} ${_arch_root}/hwloc/autogen/config.h SYMBOLIC)

# The targets the layers link, as header-only interfaces over the private root (IMPORTED: its headers are
# system headers, so their own warnings are not ours).
foreach(_t Boost::headers nlohmann_json::nlohmann_json CLI11::CLI11 fmt::fmt)
  add_library(${_t} INTERFACE IMPORTED)
  set_target_properties(${_t} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES ${_root})
endforeach()
set_property(TARGET fmt::fmt PROPERTY INTERFACE_COMPILE_DEFINITIONS FMT_HEADER_ONLY=1)
add_library(Threads::Threads INTERFACE IMPORTED)
set_target_properties(Threads::Threads PROPERTIES INTERFACE_LINK_OPTIONS -pthread)
set(HWLOC_INCLUDE_DIRS ${_root} ${_arch_root})

# Small and self-contained: unused sections dropped, symbols stripped at link time (zig's lld).
add_compile_options(-ffunction-sections -fdata-sections)
add_link_options(-Wl,--gc-sections -s)
execute_process(COMMAND ${DDPRUN_ZIG} version OUTPUT_VARIABLE _zig_version OUTPUT_STRIP_TRAILING_WHITESPACE)
set(DDPRUN_TOOLCHAIN "zig ${_zig_version}")
