// The warp GEMMs' operand pipeline: ldmatrix loads of one k16 group issued ahead of the MMAs of
// the previous one.
#pragma once

#include "cuda/sm80/traits.cuh"

namespace fa::cuda::sm80 {
// Runs kSteps k16 steps of a warp GEMM whose operands are loaded kGroup steps at a time. With
// double buffering the loads of group g + 1 are issued before the MMAs of group g, so ldmatrix
// latency hides behind tensor-core work.
template <int kSteps, int kGroup, bool kDoubleBuffer, class Load, class Mma>
__device__ __forceinline__ void pipelined_gemm(Load&& load, Mma&& mma) {
  static_assert(kSteps % kGroup == 0);
  constexpr int kGroups = kSteps / kGroup;
  if constexpr (kDoubleBuffer) {
    unrolled_for<kGroup>([&](int i) { load(i); });
    unrolled_for<kGroups>([&](int g) {
      if (g + 1 < kGroups) unrolled_for<kGroup>([&](int i) { load((g + 1) * kGroup + i); });
      unrolled_for<kGroup>([&](int i) { mma(g * kGroup + i); });
    });
  } else {
    unrolled_for<kGroups>([&](int g) {
      unrolled_for<kGroup>([&](int i) { load(g * kGroup + i); });
      unrolled_for<kGroup>([&](int i) { mma(g * kGroup + i); });
    });
  }
}

}  // namespace fa::cuda::sm80
