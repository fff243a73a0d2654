// The mma.sync family's kernel configs, host only (the CPU-only build validates and names them
// too): the validity rules its kernel templates static_assert (traits.cuh), its shared memory,
// its canonical form, and, in config.cpp, the reasons for its rules, the seed's autotune filter
// and its knobs' tokens in a kernel name (its answers to core/family_config.hpp).
#pragma once

#include <cstdint>

#include "core/kernel_config.hpp"
#include "flashattn.h"

namespace fa {
struct FamilyConfig;  // core/family_config.hpp, which config.cpp includes: the kernel files
                      // include this header, and that one's <string> and <vector> would cost
                      // each of them about 2 s of compile time (core/kernel_config.hpp)
}  // namespace fa

namespace fa::cuda::sm80 {

inline constexpr int32_t kId = FA_FAMILY_MMA_SYNC;

// Q, K and V tiles, single-buffered; O is staged in Q's region.
constexpr int64_t smem_bytes(KernelConfig const& c) {
  return (int64_t(c.B_r) + 2 * int64_t(c.B_c)) * c.d_head * dtype_size(c.dtype);
}
// With an e4m3 cache, the K and V tiles' bytes are staged after them: per row, 8 threads' slots
// of 16 bytes for each 128 columns begun (smem_tile.cuh's E4M3Tile); then a float per query row
// (bf16 queries' powers of two, smem_tile.cuh's q_for_mma).
constexpr int64_t e4m3_smem_bytes(KernelConfig const& c) {
  return smem_bytes(c) + 2 * int64_t(c.B_c) * 128 * ((c.d_head + 127) / 128) + 4 * int64_t(c.B_r);
}
// The key split's e4m3 instantiation (kernel.cuh's kDirect): Q, two stages of e4m3 K and V
// tiles, the query rows' powers of two; no 16-bit K or V tile. d 128's (64, 128) tile takes
// 80 KiB and 256 bytes (the conversion's instantiation: 112 KiB and 256 bytes), within the
// 99 KiB of sm_86, sm_89 and sm_120. Three stages (112 KiB, still two blocks per H200 SM) were
// 0.99-1.02x on the H200 (d 128 decode, batch 1-64 x 8k-128k, pages 0 and 16).
constexpr int64_t e4m3_split_smem_bytes(KernelConfig const& c) {
  return int64_t(c.B_r) * c.d_head * dtype_size(c.dtype) + 4 * int64_t(c.B_c) * c.d_head +
         4 * int64_t(c.B_r);
}

namespace rules {

constexpr bool is_pow2_or_zero(int n) { return n >= 0 && (n & (n - 1)) == 0; }

// A load granularity n (in 8-column fragments) along a reduction dimension of `extent` columns:
// 0 (whole block) or a power of two other than 1 (ldmatrix.x4 moves 16 columns = 2 fragments at a
// time), at most extent/8, or extent/16 when double-buffered (two loads must fit), and dividing it.
constexpr bool load_tiles_pow2(int n) { return is_pow2_or_zero(n) && n != 1; }
constexpr bool load_tiles_fit(int n, int extent, bool double_buffer) {
  return n <= (double_buffer ? extent / 2 : extent) / 8;
}
constexpr bool load_tiles_divide(int n, int extent) { return n == 0 || (extent / 8) % n == 0; }

// mma.sync m16n8k16 tiles of fp16 or bf16 (e4m3 caches are converted on load; e4m3 queries run
// on the sm90 family only).
constexpr bool dtype_ok(KernelConfig const& c) {
  return c.dtype == DType::kFP16 || c.dtype == DType::kBF16;
}
constexpr bool n_warps_ok(KernelConfig const& c) { return c.n_warps == 4 || c.n_warps == 8; }
// Each warp owns whole m16 MMA row tiles of the Q block.
constexpr bool B_r_ok(KernelConfig const& c) {
  return c.n_warps > 0 && c.B_r > 0 && c.B_r % (16 * c.n_warps) == 0;
}
// S = Q K^T is computed in n8 tiles loaded two at a time (16 keys per ldmatrix.x4).
constexpr bool B_c_ok(KernelConfig const& c) { return c.B_c > 0 && c.B_c % 16 == 0; }
// One global->shared pass moves threads/8 rows (8 threads x 16 B per 64-column row).
constexpr bool copy_rows_ok(KernelConfig const& c) {
  int64_t rows = c.threads() / 8;
  return rows > 0 && c.B_r % rows == 0 && c.B_c % rows == 0;
}
constexpr bool Q_tiles_ok(KernelConfig const& c) {
  return load_tiles_pow2(c.Q_mma_load_K_tiles) &&
         load_tiles_fit(c.Q_mma_load_K_tiles, c.d_head, c.mma_double_buffer_loads) &&
         load_tiles_divide(c.Q_mma_load_K_tiles, c.d_head);
}
constexpr bool K_tiles_ok(KernelConfig const& c) {
  return load_tiles_pow2(c.K_mma_load_K_tiles) &&
         load_tiles_fit(c.K_mma_load_K_tiles, c.d_head, c.mma_double_buffer_loads) &&
         load_tiles_divide(c.K_mma_load_K_tiles, c.d_head);
}
constexpr bool V_tiles_ok(KernelConfig const& c) {
  return load_tiles_pow2(c.V_mma_load_K_tiles) &&
         load_tiles_fit(c.V_mma_load_K_tiles, c.B_c, c.mma_double_buffer_loads) &&
         load_tiles_divide(c.V_mma_load_K_tiles, c.B_c);
}
// Q and K share the QK^T k-loop, so a streamed Q must step with K.
constexpr bool QK_tiles_match(KernelConfig const& c) {
  return c.Q_mma_load_K_tiles == c.K_mma_load_K_tiles || c.Q_mma_load_K_tiles == 0;
}
constexpr bool smem_ok(KernelConfig const& c) { return smem_bytes(c) <= kMaxSmemBytesAnyArch; }

// The tiles that also read e4m3 (FP8) K/V caches: one decode tile per head dim of the default
// set (B_r 64, 4 warps, cp.async; B_c 128 where the head dim has one, as decode_rank prefers,
// else B_c 64 with whole-block register loads), which also takes chunked prefill on such a
// cache. A third instantiation costs about 18 s of compile time per kernel (sm_80 + sm_90a,
// one core: fa_fwd_sm80_bf16_hd128_0.cu 44.8 -> 63.1 s with one), so not every kernel gets one.
constexpr bool fp8_kv_tile(KernelConfig const& c) {
  bool const whole_block_loads =
      c.Q_mma_load_K_tiles == 0 && c.K_mma_load_K_tiles == 0 && c.V_mma_load_K_tiles == 0;
  return c.B_r == 64 && c.n_warps == 4 && c.async_copy &&
         (c.B_c == 128 || (c.d_head >= 192 && whole_block_loads));
}

// The decode tiles whose 16-bit instantiation also runs with the key split (kernel.cuh's
// kKeySplit): each warp's share of a key block is whole k16 steps in whole groups of V loads
// and an even number of n8 tiles (the tuning sets' (64, 32) tiles at d >= 192 have neither).
constexpr bool key_split_tile(KernelConfig const& c) {
  if (!fp8_kv_tile(c) || c.B_c % (16 * c.n_warps) != 0) return false;
  int const steps = c.B_c / 16 / c.n_warps;  // each warp's k16 steps of P V
  int const group = c.V_mma_load_K_tiles ? c.V_mma_load_K_tiles / 2 : c.B_c / 16;
  return steps % (group < steps ? group : steps) == 0;
}

// The family's knobs at their defaults, as in a config of another family: all 0, so one config
// names one kernel there.
constexpr bool knobs_unset(KernelConfig const& c) {
  return !c.async_copy && !c.eager_load_blocks && !c.swizzled && c.Q_mma_load_K_tiles == 0 &&
         c.K_mma_load_K_tiles == 0 && c.V_mma_load_K_tiles == 0 && !c.mma_double_buffer_loads &&
         !c.optimized_softmax;
}

// The family's own rules, the common ones holding (validate() also wants the other families'
// knobs unset).
constexpr bool own(KernelConfig const& c) {
  return dtype_ok(c) && n_warps_ok(c) && B_r_ok(c) && B_c_ok(c) && copy_rows_ok(c) && Q_tiles_ok(c) &&
         K_tiles_ok(c) && V_tiles_ok(c) && QK_tiles_match(c) && smem_ok(c);
}

}  // namespace rules

// The config of the family that compiles to the same code as `c`. Three fields can be no-ops:
//   - K loaded d_head/8 fragments at a time is the whole block, as K = 0 (when Q is resident; a
//     streamed Q reloads per block and differs);
//   - V loaded B_c/8 fragments at a time is the whole block, as V = 0;
//   - double buffering changes nothing when neither GEMM loads in more than one group.
constexpr KernelConfig canonical(KernelConfig c) {
  // int64: the config may be unvalidated.
  int64_t const k8 = int64_t(c.K_mma_load_K_tiles) * 8, v8 = int64_t(c.V_mma_load_K_tiles) * 8;
  if (c.Q_mma_load_K_tiles == 0 && k8 == c.d_head) c.K_mma_load_K_tiles = 0;
  if (v8 == c.B_c) c.V_mma_load_K_tiles = 0;
  bool const qk_groups = c.K_mma_load_K_tiles != 0 && k8 < c.d_head;
  bool const pv_groups = c.V_mma_load_K_tiles != 0 && v8 < c.B_c;
  if (!qk_groups && !pv_groups) c.mma_double_buffer_loads = false;
  return c;
}

extern FamilyConfig const kConfig;

}  // namespace fa::cuda::sm80
