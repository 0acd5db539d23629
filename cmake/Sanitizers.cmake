# DDPRUN_SANITIZE=ON builds everything with ASan and UBSan; DDPRUN_SANITIZE_THREAD=ON with TSan
# (the agent's and the rendezvous's threads). The test command runs the unit tests under both.
if(DDPRUN_SANITIZE AND DDPRUN_SANITIZE_THREAD)
  message(FATAL_ERROR "DDPRUN_SANITIZE and DDPRUN_SANITIZE_THREAD cannot be combined")
endif()
if(DDPRUN_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
if(DDPRUN_SANITIZE_THREAD)
  # -Wno-tsan: Asio's handler recycling uses atomic_thread_fence, which GCC says TSan does not model.
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer -Wno-tsan)
  add_link_options(-fsanitize=thread)
endif()
