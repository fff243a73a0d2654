// The mma.sync family's compile-time view of a KernelConfig: the rules it static_asserts (the
// common ones and config.hpp's), the warp and fragment counts every role of the kernel derives
// from it, and unrolled loops.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "cuda/sm80/config.hpp"

namespace fa::cuda::sm80 {

// Calls f(0), ..., f(N - 1) from a loop unrolled completely, so register-array indices fold to
// constants and the fragments live in registers rather than local memory. f is instantiated once:
// a fold over std::integral_constant arguments made the same code with one instantiation per
// iteration (nested three deep: a d 128 file's unoptimised PTX was 58 MB, and cicc spent 50 s
// per arch on its 3 tiles).
template <int N, class F>
__device__ __forceinline__ void unrolled_for(F&& f) {
#pragma unroll
  for (int i = 0; i < N; ++i) f(i);
}

template <KernelConfig C>
struct Traits {
  static_assert(fa::rules::fields_in_range(C), "a field is out of [0, 65536]");
  static_assert(rules::dtype_ok(C), "dtype must be FP16 or BF16");
  static_assert(fa::rules::d_head_ok(C), "d_head must be a multiple of 64 in [64, 256]");
  static_assert(rules::n_warps_ok(C), "n_warps must be 4 or 8");
  static_assert(rules::B_r_ok(C), "B_r must be a multiple of 16 * n_warps");
  static_assert(rules::B_c_ok(C), "B_c must be a multiple of 16");
  static_assert(rules::copy_rows_ok(C), "B_r and B_c must be multiples of threads / 8");
  static_assert(rules::Q_tiles_ok(C), "Q_mma_load_K_tiles: 0 or a power of two != 1 that fits d_head");
  static_assert(rules::K_tiles_ok(C), "K_mma_load_K_tiles: 0 or a power of two != 1 that fits d_head");
  static_assert(rules::V_tiles_ok(C), "V_mma_load_K_tiles: 0 or a power of two != 1 that fits B_c");
  static_assert(rules::QK_tiles_match(C), "Q_mma_load_K_tiles must be 0 or K_mma_load_K_tiles");
  static_assert(rules::smem_ok(C), "shared memory exceeds 227 KiB");

  using T = std::conditional_t<C.dtype == DType::kFP16, __half, __nv_bfloat16>;

  static constexpr int kThreads = C.threads();
  static constexpr int kRowsPerWarp = C.B_r / C.n_warps;
  static constexpr int kMTiles = kRowsPerWarp / 16;  // m16 tiles of Q/S/O per warp
  static constexpr int kDSteps = C.d_head / 16;      // k16 steps of S = Q K^T
  static constexpr int kDTiles = C.d_head / 8;       // n8 tiles of O
  static constexpr int kKeySteps = C.B_c / 16;       // k16 steps of O += P V
  static constexpr int kKeyTiles = C.B_c / 8;        // n8 tiles of S
  static constexpr int kCopyRows = kThreads / 8;     // rows per global<->shared pass
  static constexpr int kSlabs = C.d_head / 64;       // 64-column swizzle slabs

  // k16 steps loaded per register load: *_mma_load_K_tiles counts 8-column fragments, 0 = all.
  // Q either streams with K (same value) or is resident, so K's value sets the QK^T step.
  static constexpr int kQKGroup = C.K_mma_load_K_tiles ? C.K_mma_load_K_tiles / 2 : kDSteps;
  static constexpr int kPVGroup = C.V_mma_load_K_tiles ? C.V_mma_load_K_tiles / 2 : kKeySteps;
  static constexpr bool kQResident = C.Q_mma_load_K_tiles == 0;

  static constexpr int kSmemBytes = smem_bytes(C);
  static constexpr int kE4M3SmemBytes = e4m3_smem_bytes(C);  // with an e4m3 cache
  static constexpr int kE4M3SplitSmemBytes = e4m3_split_smem_bytes(C);  // and the key split
};

// nvcc's host-stub generator cannot spell a class-type non-type template argument of a __global__
// function template, so the kernel is templated on this type, which carries the config.
template <KernelConfig C>
struct ConfigTag {
  static constexpr KernelConfig kConfig = C;
};

}  // namespace fa::cuda::sm80
