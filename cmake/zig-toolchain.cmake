# The portable build's toolchain (docs/architecture.md, "The portable build"): zig's clang with LLVM's libc++
# (linked statically) and glibc 2.28's symbol versions, from PyPI's `ziglang` (pinned in scripts/portable-env.sh,
# installed by scripts/setup.sh). Cross-compiles from any Linux host:
#   cmake -B build-portable/x86_64 --toolchain cmake/zig-toolchain.cmake -DDDPRUN_ZIG_ARCH=x86_64 -DDDPRUN_PORTABLE=ON
# (the `portable-x86_64` and `portable-aarch64` presets say the same). DDPRUN_ZIG: the zig binary; by default the
# one of the Python running the wheel build (scikit-build-core's Python_EXECUTABLE), else the project's venv.
set(CMAKE_SYSTEM_NAME Linux)
if(NOT DDPRUN_ZIG_ARCH)
  cmake_host_system_information(RESULT DDPRUN_ZIG_ARCH QUERY OS_PLATFORM)
endif()
if(NOT DDPRUN_ZIG_ARCH MATCHES "^(x86_64|aarch64)$")
  message(FATAL_ERROR "DDPRUN_ZIG_ARCH=${DDPRUN_ZIG_ARCH}: the portable build targets x86_64 or aarch64")
endif()
set(CMAKE_SYSTEM_PROCESSOR ${DDPRUN_ZIG_ARCH})
# glibc 2.28: RHEL 8's, and the floor of PyTorch's own wheels (manylinux_2_28).
set(DDPRUN_ZIG_TARGET ${DDPRUN_ZIG_ARCH}-linux-gnu.2.28)

if(NOT DDPRUN_ZIG)
  set(_python "${Python_EXECUTABLE}")
  if(NOT _python)
    execute_process(COMMAND bash -c ". \"$0\" && printf %s \"$DDPRUN_PORTABLE_PYTHON\""
                            ${CMAKE_CURRENT_LIST_DIR}/../scripts/portable-env.sh OUTPUT_VARIABLE _python)
  endif()
  execute_process(COMMAND "${_python}" -c "import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), 'zig'), end='')"
                  OUTPUT_VARIABLE DDPRUN_ZIG ERROR_QUIET)
  if(NOT EXISTS "${DDPRUN_ZIG}")
    message(FATAL_ERROR "no zig for the portable build: run scripts/setup.sh (it installs PyPI's ziglang into the "
                        "venv scripts/portable-env.sh names), or pass -DDDPRUN_ZIG=/path/to/zig")
  endif()
  set(DDPRUN_ZIG "${DDPRUN_ZIG}" CACHE FILEPATH "The zig of the portable build")
endif()
# try_compile reads this file again in its own project: hand it the same choices.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES DDPRUN_ZIG DDPRUN_ZIG_ARCH)

# `zig c++` / `zig cc` as the compilers (a compiler given with one argument: CMake keeps it as ARG1).
set(CMAKE_C_COMPILER "${DDPRUN_ZIG}" cc)
set(CMAKE_CXX_COMPILER "${DDPRUN_ZIG}" c++)
# -mcpu=baseline: no instruction beyond the architecture's base (x86-64 v1, armv8-a), so any machine runs it.
set(_flags "-target ${DDPRUN_ZIG_TARGET} -mcpu=baseline")
set(CMAKE_C_FLAGS_INIT "${_flags}")
set(CMAKE_CXX_FLAGS_INIT "${_flags}")
# Archives with zig's own ar/ranlib: they know every target's object format (the host's binutils do not).
foreach(lang C CXX)
  set(CMAKE_${lang}_ARCHIVE_CREATE "\"${DDPRUN_ZIG}\" ar qc <TARGET> <OBJECTS>")
  set(CMAKE_${lang}_ARCHIVE_APPEND "\"${DDPRUN_ZIG}\" ar q <TARGET> <OBJECTS>")
  set(CMAKE_${lang}_ARCHIVE_FINISH "\"${DDPRUN_ZIG}\" ranlib <TARGET>")
endforeach()
# Test programs are compiled, not linked: CMake cannot run a cross target's programs anyway.
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)
# Nothing of the host's: no /usr/include, no host library is ever found for the target.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
