// Masks and score transforms of the mma.sync family: the keys a query row sees, and the
// rewriting of one key block's scores before the softmax.
#pragma once

#include <cstdint>

#include "cuda/forward_params.hpp"
#include "cuda/sequence_view.cuh"
#include "cuda/sm80/traits.cuh"

namespace fa::cuda::sm80 {
// The keys query i sees: [lo, hi], clamped to [0, sk - 1] (empty when lo > hi). int64: i + sk -
// sq -/+ a window bound can leave the int32 range.
struct KeyBounds {
  int lo;
  int hi;
};
__device__ __forceinline__ KeyBounds key_bounds(ForwardParams const& p, SequenceView const& s,
                                                int i) {
  int64_t const diag = int64_t(i) + s.sk - s.sq;
  int64_t const lo = max(diag - p.window_left, int64_t(0));
  int64_t const hi = min(diag + p.window_right, int64_t(s.sk) - 1);
  return {int(min(lo, int64_t(s.sk))), int(max(hi, int64_t(-1)))};
}

// Rewrites the scores `s` of kKeyTiles n8 tiles of keys from key0 on (accumulator layout, lane
// column t) in place: with `transform` as log2 e * bias(softcap(scale * s)), and with `masked`
// invisible keys (past the sequence, outside the row's causal/window bounds) as -inf.
// query_at(mt, h) is the query of accumulator row (mt, h); slope_at(mt, h) its ALiBi slope in
// log2 units (read only with ALiBi).
template <KernelConfig C, int kKeyTiles, class QueryAt, class SlopeAt>
__device__ __forceinline__ void transform_and_mask(
    ForwardParams const& p, SequenceView const& seq, int key0, int t, bool transform, bool masked,
    float (&s)[Traits<C>::kMTiles][kKeyTiles][4], QueryAt const& query_at,
    SlopeAt const& slope_at) {
  using Tr = Traits<C>;
  constexpr int kMT = Tr::kMTiles;
  unrolled_for<kMT>([&](int mt) {
    unrolled_for<2>([&](int h) {
      int const query = query_at(mt, h);
      KeyBounds const b = key_bounds(p, seq, query);
      int64_t const diag = int64_t(query) + seq.sk - seq.sq;
      float slope = 0.f;
      if (transform && p.alibi != 0) slope = slope_at(mt, h);
      unrolled_for<kKeyTiles>([&](int n) {
        unrolled_for<2>([&](int e) {
          int const key = key0 + n * 8 + 2 * t + e;
          float& x = s[mt][n][2 * h + e];
          if (transform) {
            float y = x * p.softmax_scale;
            if (p.softcap > 0.f) y = p.softcap * tanhf(y * p.inv_softcap);
            y *= 1.4426950408889634f;
            if (p.alibi != 0) y -= slope * fabsf(float(diag - key));
            x = y;
          }
          if (masked && (key < b.lo || key > b.hi)) x = -INFINITY;
        });
      });
    });
  });
}

}  // namespace fa::cuda::sm80
