// The CPU backend: FlashAttention forward on host buffers, threaded and tiled, fp32 accumulation.
#pragma once

#include "core/problem.hpp"
#include "flashattn.h"

namespace fa::cpu {

// Computes attention on host buffers laid out as `p` says (element strides; dim contiguous).
// q has p.dtype, k and v p.kv_dtype, o p.out_dtype (fp16, bf16, fp32; e4m3 inputs descaled by
// run.q/k/v_descale); lse (nullable) is float32 [batch, heads_q, seqlen_q]
// contiguous. Uses up to n_threads threads (>= 1; the calling thread is one of them). Throws
// std::bad_alloc on allocation failure (the caller catches), before any output is written.
// `run` holds the index tensors, slopes and sinks the problem uses; their contents have been
// checked (check_run_pointers()).
void forward(const Problem& p, const void* q, const void* k, const void* v, void* o, float* lse,
             const RunPointers& run, int n_threads);

// Reading them on the host, checks that the run's index tensors (non-NULL where the problem uses
// them) are well formed: fails with FA_STATUS_INVALID_ARGUMENT naming the entry.
fa_status check_run_pointers(const Problem& p, const RunPointers& run);

// fa_merge_states on host buffers (o tensors of `dtype`, shared strides).
void merge_states(DType dtype, int64_t batch, int64_t seqlen, int64_t heads, int64_t head_dim,
                  const TensorStrides& o_strides, const void* o_a, const float* lse_a,
                  const void* o_b, const float* lse_b, void* o, float* lse);

}  // namespace fa::cpu
