// The object the trainer runs collectives on. libtorch 1.x: a ProcessGroupGloo/NCCL is a c10d::ProcessGroup.
// libtorch 2.x: they are c10d::Backend objects (a ProcessGroup dispatches to them by device), with the same
// collective methods, so the trainer holds the backend itself.
#pragma once

#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

namespace ddprun::train {

#if TORCH_VERSION_MAJOR >= 2
using Group = c10d::Backend;
#else
using Group = c10d::ProcessGroup;
#endif
using GroupPtr = c10::intrusive_ptr<Group>;

}  // namespace ddprun::train
