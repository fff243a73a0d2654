// Kernels that merge partial attention results: the split-KV combine step and fa_merge_states.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/problem.hpp"
#include "cuda/forward_params.hpp"

namespace fa::cuda {

struct MergeParams {
  void const* o_a;
  float const* lse_a;
  void const* o_b;
  float const* lse_b;
  void* o;
  float* lse;
  int64_t batch, seqlen, heads, head_dim;
  int64_t o_batch_stride, o_seq_stride, o_head_stride;
};

// Thread blocks of the merge kernels for `items` (row, head) pairs: one warp each.
int64_t warp_blocks(int64_t items);

// Merges the num_splits partial results a split forward launch left in params.o_partial /
// lse_partial into params.o and params.lse (adding params.sinks). fp16 or bf16 output.
// `programmatic` (sm_90 and newer) lets it launch before the forward kernel ends, hiding the
// launch latency; it waits for the partials on the device.
cudaError_t launch_combine(ForwardParams const& params, DType dtype, int head_dim,
                           bool programmatic, cudaStream_t stream);

// fa_merge_states on the current device (fp16 or bf16).
cudaError_t launch_merge(MergeParams const& params, DType dtype, cudaStream_t stream);

}  // namespace fa::cuda
