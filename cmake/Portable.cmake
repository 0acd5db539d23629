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
# zig's clang refuses __DATE__ (-Wdate-time: not reproducible): --version names the commit's date instead.
execute_process(COMMAND git -C ${CMAKE_SOURCE_DIR} log -1 --format=%cs OUTPUT_VARIABLE DDPRUN_BUILD_DATE
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT DDPRUN_BUILD_DATE)
  set(DDPRUN_BUILD_DATE "unknown")
endif()
# ccache knows zig by its version, not by the binary's mtime (its default check): a venv installed again, in CI or in
# another clone, holds the same compiler with another mtime, and its objects stay hits.
if(CCACHE_PROGRAM AND CMAKE_CXX_COMPILER_LAUNCHER STREQUAL CCACHE_PROGRAM)
  foreach(_lang C CXX)
    set(CMAKE_${_lang}_COMPILER_LAUNCHER ${CMAKE_COMMAND} -E env CCACHE_COMPILERCHECK=string:zig-${_zig_version}
                                         ${CCACHE_PROGRAM})
  endforeach()
endif()

# Unity build (docs/architecture.md, "The portable build"): each library's units are compiled in batches of
# DDPRUN_PORTABLE_UNITY_BATCH, one translation unit per batch, so that Boost.Asio, fmt and libc++'s headers are
# parsed a few times per architecture instead of once per file (the portable build is cold in CI for both
# architectures). CMake's own UNITY_BUILD writes absolute paths into its unity files, which no ccache shared across
# clones in different folders could hit: these include each unit by its path relative to the unity file, and
# CCACHE_BASEDIR makes the rest relative. 0 builds unit by unit. A unit with compile definitions of its own
# (version.cpp) stays alone, so that a new commit recompiles it and nothing else.
set(DDPRUN_PORTABLE_UNITY_BATCH 8 CACHE STRING "Units per unity translation unit in the portable build; 0: none")
function(ddprun_portable_unity)
  if(NOT DDPRUN_PORTABLE_UNITY_BATCH GREATER 0)
    return()
  endif()
  set(unity_dir ${CMAKE_BINARY_DIR}/unity)
  foreach(target IN LISTS ARGN)
    get_target_property(sources ${target} SOURCES)
    get_target_property(source_dir ${target} SOURCE_DIR)
    set(batched "")
    set(alone "")
    foreach(source IN LISTS sources)
      cmake_path(ABSOLUTE_PATH source BASE_DIRECTORY ${source_dir} OUTPUT_VARIABLE path)
      get_source_file_property(defines ${path} DIRECTORY ${source_dir} COMPILE_DEFINITIONS)
      if(path MATCHES "\\.cpp$" AND NOT defines)
        list(APPEND batched ${path})
      else()
        list(APPEND alone ${path})
      endif()
    endforeach()
    list(SORT batched)
    list(LENGTH batched count)
    # As many batches as the size asks for, the units spread evenly over them.
    math(EXPR batches "(${count} + ${DDPRUN_PORTABLE_UNITY_BATCH} - 1) / ${DDPRUN_PORTABLE_UNITY_BATCH}")
    set(unity_sources "")
    set(index 0)
    foreach(batch RANGE 1 ${batches})
      math(EXPR end "${count} * ${batch} / ${batches}")
      set(content "// Generated by cmake/Portable.cmake (ddprun_portable_unity): ${target}, batch ${batch} of ${batches}.\n")
      while(index LESS end)
        list(GET batched ${index} path)
        file(RELATIVE_PATH relative ${unity_dir} ${path})
        string(APPEND content "#include \"${relative}\"\n")
        math(EXPR index "${index} + 1")
      endwhile()
      # Rewritten only when it changes: an unchanged batch is not rebuilt at the next configure.
      file(CONFIGURE OUTPUT ${unity_dir}/${target}_${batch}.cpp CONTENT "${content}" @ONLY)
      list(APPEND unity_sources ${unity_dir}/${target}_${batch}.cpp)
    endforeach()
    set_property(TARGET ${target} PROPERTY SOURCES ${unity_sources} ${alone})
  endforeach()
endfunction()
