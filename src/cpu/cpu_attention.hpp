// The CPU backend: FlashAttention forward on host buffers, threaded and tiled, fp32 accumulation.
#pragma once

#include "core/problem.hpp"

namespace fa::cpu {

// Computes attention on host buffers laid out as `p` says (element strides; dim contiguous).
// q/k/v/o have p.dtype (fp16, bf16 or fp32); lse (nullable) is float32 [batch, heads_q, seqlen_q]
// contiguous. Uses up to n_threads threads (>= 1; the calling thread is one of them). Throws
// std::bad_alloc on allocation failure (the caller catches), before any output is written.
void forward(const Problem& p, const void* q, const void* k, const void* v, void* o, float* lse,
             int n_threads);

}  // namespace fa::cpu
