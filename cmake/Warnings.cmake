# One INTERFACE target carries the warning flags; every project target links it.
# -Wnull-dereference is left out: it fires inside Boost.Asio headers at -O2 (false positives).
add_library(ddprun_warnings INTERFACE)
target_compile_options(ddprun_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
  -Woverloaded-virtual -Wconversion -Wsign-conversion -Wdouble-promotion
  -Wformat=2 -Wimplicit-fallthrough)
if(DDPRUN_WERROR)
  target_compile_options(ddprun_warnings INTERFACE -Werror)
endif()
# Relaxed set for code that includes heavy third-party headers (libtorch).
add_library(ddprun_warnings_relaxed INTERFACE)
target_compile_options(ddprun_warnings_relaxed INTERFACE -Wall -Wextra)
if(DDPRUN_WERROR)
  target_compile_options(ddprun_warnings_relaxed INTERFACE -Werror)
endif()
