// One sequence's lengths and first rows, shared by both kernel families.
#pragma once

#include <cstdint>

#include "cuda/forward_params.hpp"

namespace fa::cuda {

// Where one sequence's rows live: its lengths and first rows, read from the run's index tensors
// and clamped into the buffers the config declares, so malformed indices cannot make a block
// read or write out of bounds.
struct SequenceView {
  int sq;          // query rows
  int sk;          // visible key rows
  int64_t q_first;  // varlen: first row in the packed q/o
  int64_t k_first;  // varlen: first row in the packed k/v
};

__device__ __forceinline__ SequenceView sequence_view(ForwardParams const& p, int layout,
                                                      int64_t batch) {
  SequenceView s{p.seqlen_q, p.seqlen_k, 0, 0};
  if (layout == kLayoutVarlen) {
    int const q0 = min(max(p.cu_seqlens_q[batch], 0), p.total_q);
    int const q1 = min(max(p.cu_seqlens_q[batch + 1], q0), p.total_q);
    int const k0 = min(max(p.cu_seqlens_k[batch], 0), p.total_k);
    int const k1 = min(max(p.cu_seqlens_k[batch + 1], k0), p.total_k);
    s = {min(q1 - q0, p.seqlen_q), min(k1 - k0, p.seqlen_k), q0, k0};
  } else if (layout != kLayoutDense) {
    s.sk = min(max(p.cache_seqlens[batch], 0), p.seqlen_k);
  }
  return s;
}

}  // namespace fa::cuda
