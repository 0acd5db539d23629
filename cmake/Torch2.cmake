# torch 2.x beside Debian's torch 1.13: the project's venv (scripts/torch2.sh says where; scripts/setup.sh installs
# it unless DDPRUN_SKIP_TORCH2=1). DDPRUN_TORCH2_PYTHON: its interpreter, used by the torch2 tests and benchmarks;
# empty when scripts/torch2.sh could not be read. DDPRUN_TORCH2_DIR: the wheel's torch package (headers, libraries),
# empty when the venv is not installed.
execute_process(COMMAND bash -c ". \"$0\" && printf %s \"$DDPRUN_TORCH2_PYTHON\"" ${PROJECT_SOURCE_DIR}/scripts/torch2.sh
                OUTPUT_VARIABLE _torch2_python)
set(DDPRUN_TORCH2_PYTHON "${_torch2_python}" CACHE FILEPATH
    "The torch 2.x interpreter of the torch2 tests and benchmarks (default: scripts/torch2.sh's venv)")
set(DDPRUN_TORCH2_DIR "")
if(DDPRUN_TORCH2_PYTHON)
  get_filename_component(_torch2_bin "${DDPRUN_TORCH2_PYTHON}" DIRECTORY)
  get_filename_component(_torch2_venv "${_torch2_bin}" DIRECTORY)
  file(GLOB _torch2_dir "${_torch2_venv}/lib/python3*/site-packages/torch/include/torch")
  if(_torch2_dir)
    list(GET _torch2_dir 0 _torch2_dir)
    get_filename_component(DDPRUN_TORCH2_DIR "${_torch2_dir}/../.." ABSOLUTE)
  endif()
endif()
