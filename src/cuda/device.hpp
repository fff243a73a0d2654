// The GPU side of a context, shared by every kernel family: device discovery and the per-device
// kernel view (device.cpp), the choice across families (choice.cpp), and launch, merge and
// timing (launch.cpp). Family rules come from the family interface (family.hpp).
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <string>
#include <vector>

#include "core/function_ref.hpp"
#include "core/problem.hpp"
#include "cuda/combine.hpp"
#include "cuda/family.hpp"
#include "cuda/kernel_entry.hpp"
#include "flashattn.h"

namespace fa::cuda {

struct Device {
  int ordinal = 0;
  int cc_major = 0;
  int cc_minor = 0;
  int smem_per_block_optin = 0;
  int sm_count = 0;
  std::vector<KernelEntry const*> kernels;  // the registered kernels that run on this device
  std::map<KernelEntry const*, int> blocks_per_sm;  // each kernel's occupancy on this device
};

// FA_STATUS_CUDA_ERROR with a detail naming `what` and the error.
fa_status cuda_fail(cudaError_t e, char const* what);

// Runs `body` with `ordinal` as the current device, then gives the calling thread back exactly
// the context it had. Saving and restoring the driver context (not cudaGetDevice/cudaSetDevice)
// matters on a thread with no context yet: restoring "device 0" there would create a context on
// GPU 0 in a process that only uses another GPU.
fa_status on_device(int ordinal, FunctionRef<fa_status()> body);

// Reads the device's properties, prepares every registered kernel on it (once per device per
// process) and fills the kernel view. Leaves the calling thread's current device unchanged.
fa_status open_device(int ordinal, Device* out);

// Checks what every GPU kernel needs of a problem (dtype, alignment of strides, grid limits).
fa_status check_problem(Problem const& p);

// Why kernel `k` cannot run `p` (its dtype, head dim, grid size, and its family's rules); empty
// when it can.
std::string cannot_run(KernelConfig const& k, Problem const& p);

// As cannot_run(k, p), and also why not on `device`: the shared memory `k` needs for `p` (an
// e4m3 cache's staging) above the device's opt-in limit.
std::string cannot_run(Device const& device, KernelConfig const& k, Problem const& p);

// Picks a kernel of `device` for `p`: for a decode-like problem the family's best-ranked decode
// kernel, else the measured table's pick (heuristic.hpp) or its fallback, else the runnable
// kernel with the largest tile; or fails with FA_STATUS_UNSUPPORTED and the reason.
fa_status choose_kernel(Device const& device, Problem const& p, KernelEntry const** out);

// The schedule of `p` on `kernel`, from its family: packing, the grid, and the number of splits
// (p.num_splits when forced, else the family's heuristic), or 1 with `allow_split` false.
Schedule make_schedule(Device const& device, KernelEntry const& kernel, Problem const& p,
                       bool allow_split);

// Launch arguments of kernel `k` for `p` under schedule `s`, without pointers, from its family.
ForwardParams make_params(KernelConfig const& k, Problem const& p, Schedule const& s);

// The tensors and run-time pointers of one launch.
struct LaunchTensors {
  void const* q;
  void const* k;
  void const* v;
  void* o;
  float* lse;
  RunPointers run;
  void* workspace;
  size_t workspace_size;
};

// Checks the pointers (non-NULL where used, aligned, workspace large enough) and launches the
// forward kernel (and, when split, the combine kernel) on `stream` on the device.
fa_status launch(Device const& device, KernelEntry const& kernel, ForwardParams params,
                 Schedule const& schedule, LaunchTensors const& t, cudaStream_t stream);

// fa_merge_states on the device (pointers checked by the caller).
fa_status merge(Device const& device, DType dtype, MergeParams const& params, cudaStream_t stream);

// Launches `kernel` once to warm up, then `runs` times between CUDA events on `stream`, and
// returns the median time. Synchronises the stream.
fa_status time_kernel(Device const& device, KernelEntry const& kernel, Problem const& p,
                      void const* q, void const* k, void const* v, void* o, float* lse,
                      cudaStream_t stream, int runs, float* median_ms);

}  // namespace fa::cuda
