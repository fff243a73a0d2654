// One registered GPU kernel: its config and the type-erased functions that launch and prepare it.
#pragma once

#include <cuda_runtime_api.h>

#include "core/kernel_config.hpp"
#include "cuda/forward_params.hpp"

namespace fa::cuda {

struct KernelEntry {
  KernelConfig config;
  // Sets the dynamic shared-memory limit on the current device when the kernel needs over 48 KiB.
  cudaError_t (*prepare)();
  // Reads the kernel's attributes on the current device; fails when no compiled image runs there.
  cudaError_t (*attributes)(cudaFuncAttributes* out);
  // Resident blocks per SM on the current device (for the split-KV heuristic).
  cudaError_t (*occupancy)(int* blocks_per_sm);
  // Launches `grid` blocks (see ForwardParams for their order) on `stream`; returns the launch
  // error. `general` selects the instantiation with every feature (layouts, biases, sinks,
  // GQA packing, splits, paged caches); the other runs dense, varlen and contiguous-cache
  // problems with causal and window masks only (the sm90 family's also paged caches, and head
  // dims below the kernel's on a narrow pair where one fits, else the general instantiation:
  // sm90/launch.cuh). `programmatic` (sm_90 and newer) launches it as
  // a programmatic dependent of the stream's previous kernel: its blocks may be placed while
  // that kernel's last ones run, and wait on the device (griddepcontrol.wait, before anything
  // else) until it has finished and its writes are visible.
  cudaError_t (*launch)(ForwardParams const& params, dim3 grid, bool general, bool programmatic,
                        cudaStream_t stream);
};

// The registry of every kernel in this build (cuda/registry.hpp). The generated kernel files add
// their entries through add_kernel() and see the registry declared only: the std::map in it
// would have each of them parse <map> (about 0.25 s a file).
struct Registry;

// Adds `entry` under entry.config unless a kernel of that config is there already.
void add_kernel(Registry& registry, KernelEntry const& entry);

}  // namespace fa::cuda
