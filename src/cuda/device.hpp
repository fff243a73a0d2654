// The GPU side of a context: device discovery, the per-device kernel view, kernel choice and launch.
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <string>
#include <vector>

#include "core/problem.hpp"
#include "cuda/combine.hpp"
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

// How a problem runs on one kernel: GQA packing, key splits, grid and workspace.
struct Schedule {
  bool pack_gqa = false;
  int num_splits = 1;
  bool general = false;        // needs the kernels' general instantiation (KernelEntry::launch)
  int64_t blocks = 0;          // thread blocks of the forward kernel
  size_t workspace_bytes = 0;  // split-KV partials; 0 when unsplit
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

// The schedule of `p` on `k`: packing, the grid, and the number of splits (p.num_splits when
// forced, else a heuristic over the grid, the key length and the device's SMs), or 1 with
// `allow_split` false.
Schedule make_schedule(Device const& device, KernelEntry const& kernel, Problem const& p,
                       bool allow_split);

// Launch arguments of kernel `k` for `p` under schedule `s`, without pointers.
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
