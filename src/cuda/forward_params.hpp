// Arguments of one forward launch, shared by the host launcher and the kernels.
#pragma once

#include <cstdint>

namespace fa::cuda {

struct ForwardParams {
  void const* __restrict__ q;
  void const* __restrict__ k;
  void const* __restrict__ v;
  void* __restrict__ o;
  float* __restrict__ lse;  // nullable; [batch, heads_q, seqlen_q] contiguous
  int64_t q_batch_stride, q_seq_stride, q_head_stride;  // elements
  int64_t k_batch_stride, k_seq_stride, k_head_stride;
  int64_t v_batch_stride, v_seq_stride, v_head_stride;
  int64_t o_batch_stride, o_seq_stride, o_head_stride;
  int32_t seqlen_q;
  int32_t seqlen_k;
  int32_t heads_q;
  int32_t q_heads_per_kv;  // heads_q / heads_kv
  int32_t n_q_blocks;      // ceil(seqlen_q / B_r); the grid is n_q_blocks * heads_q * batch blocks
  int32_t causal;          // key j is visible to query i iff j <= i + causal_offset
  int32_t causal_offset;   // seqlen_k - seqlen_q (bottom-right alignment)
  float scale_log2;        // softmax_scale * log2(e): scores go through exp2
  float softmax_scale;     // for the natural-log LSE
};

}  // namespace fa::cuda
