# Options for optional dependencies: AUTO (use it when found), ON (required: the configure stops, naming what to
# install, when it is missing) or OFF (never looked for). A packager pins each to ON or OFF, so that what gets built
# does not change with what happens to be installed on the build machine.

# ddprun_tristate(NAME DEFAULT DOC): declares the cache option NAME and sets NAME to AUTO, ON or OFF in the caller's
# scope (a boolean value such as TRUE or 0 counts as ON or OFF).
function(ddprun_tristate name default doc)
  set(${name} ${default} CACHE STRING "${doc}: AUTO (when found), ON (required) or OFF")
  set_property(CACHE ${name} PROPERTY STRINGS AUTO ON OFF)
  string(TOUPPER "${${name}}" value)
  if(NOT value STREQUAL "AUTO")
    if(${name})
      set(value ON)
    else()
      set(value OFF)
    endif()
  endif()
  set(${name} ${value} PARENT_SCOPE)
endfunction()

# ddprun_require(NAME FOUND WHAT): stops the configure when option NAME is ON and FOUND is false.
function(ddprun_require name found what)
  if(${name} STREQUAL "ON" AND NOT found)
    message(FATAL_ERROR "${name}=ON but ${what} was not found: install it, or configure with -D${name}=OFF")
  endif()
endfunction()
