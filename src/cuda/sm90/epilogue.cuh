// The sm90 family's epilogue: normalises a consumer thread's two rows of O, writes them (a row
// with no visible key gets 0) and their natural-log LSE, or, for one split of the keys, the fp32
// partials the combine kernel merges (which adds the sinks once).
#pragma once

#include <cstdint>

#include "cuda/forward_params.hpp"
#include "cuda/ptx.cuh"
#include "cuda/sm90/softmax.cuh"
#include "cuda/sm90/tile_scheduler.cuh"

namespace fa::cuda::sm90 {

// row0: the thread's first row in its sequence; c: the exponent's scale (softmax's).
// A sink joins the denominator: l' = l e^(m - M) + e^(sink - M) with M = max(m, sink).
template <class T, bool kGeneral>
__device__ __forceinline__ void store_tile(ForwardParams const& p, Work const& w,
                                           OnlineSoftmax<T> const& softmax,
                                           float const (&o)[T::kD / 2], float c, int64_t row0,
                                           int lane) {
  using Elem = typename T::Elem;
  Elem* o_ptr = static_cast<Elem*>(p.o);
  bool const split_out = kGeneral && p.num_splits > 1;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = detail::quad_sum(softmax.row_sum[r]);
    float top = sum > 0.f ? softmax.row_max[r] * c * 0.69314718055994531f : -INFINITY;  // natural log
    float out_scale = 1.f;
    if (kGeneral && p.sinks != nullptr && !split_out) {
      float const sink = p.sinks[w.head];
      float const m = top;
      top = fmaxf(m, sink);
      out_scale = m == -INFINITY ? 0.f : __expf(m - top);
      sum = sum * out_scale + (sink == -INFINITY ? 0.f : __expf(sink - top));  // -inf: no sink
    }
    float const inv = sum > 0.f ? out_scale / sum : 0.f;
    int64_t const row = row0 + 8 * r;
    if (row >= w.seq.sq) continue;
    if (split_out) {
      // [num_splits, rows, heads_q, d] and [num_splits, heads_q, rows] (forward_params.hpp).
      int64_t const out_row =
          (p.layout == kLayoutVarlen ? w.seq.q_first : int64_t(w.batch) * p.seqlen_q) + row;
      int64_t const slot = int64_t(w.split) * p.partial_rows + out_row;
      float* dst = p.o_partial + (slot * p.heads_q + w.head) * T::kD + 2 * (lane % 4);
#pragma unroll
      for (int j = 0; j < T::kD / 8; ++j) {
        *reinterpret_cast<float2*>(dst + 8 * j) =
            make_float2(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv);
      }
      if (lane % 4 == 0) {
        p.lse_partial[(int64_t(w.split) * p.heads_q + w.head) * p.partial_rows + out_row] =
            sum > 0.f ? top + logf(sum) : -INFINITY;
      }
      continue;
    }
    Elem* out = o_ptr + w.batch * p.o_batch_stride + (w.seq.q_first + row) * p.o_seq_stride +
                w.head * p.o_head_stride;
#pragma unroll
    for (int j = 0; j < T::kD / 8; ++j) {
      uint32_t const v = ptx::pack2<Elem>(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv);
      *reinterpret_cast<uint32_t*>(out + 8 * j + 2 * (lane % 4)) = v;
    }
    if (p.lse != nullptr && lane % 4 == 0) {
      float const lse = sum > 0.f ? top + logf(sum) : -INFINITY;
      int64_t const at = p.layout == kLayoutVarlen
                             ? int64_t(w.head) * p.total_q + w.seq.q_first + row
                             : (int64_t(w.batch) * p.heads_q + w.head) * p.seqlen_q + row;
      p.lse[at] = lse;
    }
  }
}

}  // namespace fa::cuda::sm90
