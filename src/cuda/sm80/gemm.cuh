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
    static_for<kGroup>([&](auto i) { load(i); });
    static_for<kGroups>([&](auto g) {
      constexpr int kG = decltype(g)::value;
      if constexpr (kG + 1 < kGroups) {
        static_for<kGroup>([&](auto i) { load(Int<(kG + 1) * kGroup + decltype(i)::value>{}); });
      }
      static_for<kGroup>([&](auto i) { mma(Int<kG * kGroup + decltype(i)::value>{}); });
    });
  } else {
    static_for<kGroups>([&](auto g) {
      constexpr int kG = decltype(g)::value;
      static_for<kGroup>([&](auto i) { load(Int<kG * kGroup + decltype(i)::value>{}); });
      static_for<kGroup>([&](auto i) { mma(Int<kG * kGroup + decltype(i)::value>{}); });
    });
  }
}

}  // namespace fa::cuda::sm80
