// The GPU side of a context: device discovery, the per-device kernel view, kernel choice and launch.
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "core/problem.hpp"
#include "cuda/kernel_entry.hpp"
#include "flashattn.h"

namespace fa::cuda {

struct Device {
  int ordinal = 0;
  int cc_major = 0;
  int cc_minor = 0;
  int smem_per_block_optin = 0;
  std::vector<KernelEntry const*> kernels;  // the registered kernels that run on this device
};

// Reads the device's properties, prepares every registered kernel on it (once per device per
// process) and fills the kernel view. Leaves the calling thread's current device unchanged.
fa_status open_device(int ordinal, Device* out);

// Checks what every GPU kernel needs of a problem (dtype, alignment of strides, grid limits).
fa_status check_problem(Problem const& p);

// Why kernel `k` cannot run `p`; empty when it can.
std::string cannot_run(KernelConfig const& k, Problem const& p);

// Picks a kernel of `device` for `p`, or fails with FA_STATUS_UNSUPPORTED and the reason.
fa_status choose_kernel(Device const& device, Problem const& p, KernelEntry const** out);

// Launch arguments of kernel `k` for `p` without tensor pointers, and its grid.
ForwardParams make_params(KernelConfig const& k, Problem const& p);
dim3 make_grid(KernelConfig const& k, Problem const& p);

// Checks the tensor pointers (non-NULL, 16-byte aligned) and launches on `stream` on the device.
fa_status launch(Device const& device, KernelEntry const& kernel, ForwardParams params, dim3 grid,
                 void const* q, void const* k, void const* v, void* o, float* lse,
                 cudaStream_t stream);

// Launches `kernel` once to warm up, then `runs` times between CUDA events on `stream`, and
// returns the median time. Synchronises the stream.
fa_status time_kernel(Device const& device, KernelEntry const& kernel, Problem const& p,
                      void const* q, void const* k, void const* v, void* o, float* lse,
                      cudaStream_t stream, int runs, float* median_ms);

}  // namespace fa::cuda
