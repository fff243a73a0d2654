// One registered GPU kernel: its config and the type-erased functions that launch and prepare it.
#pragma once

#include <cuda_runtime_api.h>

#include <map>

#include "core/kernel_config.hpp"
#include "cuda/forward_params.hpp"

namespace fa::cuda {

struct KernelEntry {
  KernelConfig config;
  // Sets the dynamic shared-memory limit on the current device when the kernel needs over 48 KiB.
  cudaError_t (*prepare)();
  // Reads the kernel's attributes on the current device; fails when no compiled image runs there.
  cudaError_t (*attributes)(cudaFuncAttributes* out);
  // Launches grid (ceil(seqlen_q / B_r) * heads_q * batch) on `stream`; returns the launch error.
  cudaError_t (*launch)(ForwardParams const& params, dim3 grid, cudaStream_t stream);
};

using Registry = std::map<KernelConfig, KernelEntry>;

// Every kernel compiled into this build, in KernelConfig order. Built on first use, then immutable.
Registry const& registry();

}  // namespace fa::cuda
