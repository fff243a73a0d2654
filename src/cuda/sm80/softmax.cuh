// The mma.sync family's online softmax, on the m16n8k16 accumulator layout: lane (g, t) of a
// warp holds rows g and g + 8 of each m16 row tile and columns 2t, 2t + 1 of each n8 key tile, so
// the 4 lanes of a quad together hold a whole row.
#pragma once

#include "cuda/forward_params.hpp"
#include "cuda/ptx.cuh"
#include "cuda/sm80/traits.cuh"

namespace fa::cuda::sm80 {

// Turns one key block's scores `s` (kKeyTiles n8 tiles: the warp's share of the block) into
// unnormalised probabilities in place (2^(s c - m c), c = p.score_scale_log2), updating each
// row's running max and per-lane partial sum and rescaling O to the new max. kFirst: the first
// block visited, which sets the statistics outright.
template <KernelConfig C, bool kFirst, int kKeyTiles = Traits<C>::kKeyTiles>
__device__ __forceinline__ void online_softmax(
    ForwardParams const& p, float (&s)[Traits<C>::kMTiles][kKeyTiles][4],
    float (&row_max)[Traits<C>::kMTiles][2], float (&row_sum)[Traits<C>::kMTiles][2],
    float (&o_acc)[Traits<C>::kMTiles][Traits<C>::kDTiles][4]) {
  using Tr = Traits<C>;
  constexpr int kMT = Tr::kMTiles;
  unrolled_for<kMT>([&](int mt) {
    unrolled_for<2>([&](int h) {
      float block_max = -INFINITY;
      unrolled_for<kKeyTiles>([&](int n) {
        block_max = fmaxf(block_max, fmaxf(s[mt][n][2 * h], s[mt][n][2 * h + 1]));
      });
      block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 1));
      block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 2));
      float const new_max = kFirst ? block_max : fmaxf(row_max[mt][h], block_max);
      // A row that has seen no visible key yet keeps max -inf: exponentiate against 0 instead,
      // so its (all -inf) scores give 0 rather than exp2(-inf + inf) = NaN.
      float const max_scaled = new_max == -INFINITY ? 0.f : new_max * p.score_scale_log2;
      if constexpr (!kFirst) {
        // Without optimized_softmax the first block also comes here, with row_max = -inf: the
        // factor is 0, and O and l are still 0.
        float const rescale = ptx::exp2_approx(row_max[mt][h] * p.score_scale_log2 - max_scaled);
        row_sum[mt][h] *= rescale;
        unrolled_for<Tr::kDTiles>([&](int dn) {
          o_acc[mt][dn][2 * h] *= rescale;
          o_acc[mt][dn][2 * h + 1] *= rescale;
        });
      }
      row_max[mt][h] = new_max;
      float sum = 0.f;
      unrolled_for<kKeyTiles>([&](int n) {
        unrolled_for<2>([&](int e) {
          float& x = s[mt][n][2 * h + e];
          x = ptx::exp2_approx(fmaf(x, p.score_scale_log2, -max_scaled));
          sum += x;
        });
      });
      // Partial sums stay per lane; the quad reduction happens once, in the epilogue.
      row_sum[mt][h] = kFirst ? sum : row_sum[mt][h] + sum;
    });
  });
}

}  // namespace fa::cuda::sm80
