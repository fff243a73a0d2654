// The FA2 kernel's tuning knobs (the seed's kernel-config struct), its validity rules, the seed's
// autotune filter, and its short-form name.
//
// KernelConfig is both the registry's std::map key and the kernel template's non-type template
// parameter, so the rules below are constexpr: the templates static_assert them, and the C API reports
// the same rules with their reasons at run time.
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/problem.hpp"

namespace fa {

struct KernelConfig {
  DType dtype;
  int32_t d_head;
  int32_t B_r;
  int32_t B_c;
  int32_t n_warps;
  bool async_copy;
  bool eager_load_blocks;
  bool swizzled;
  int32_t Q_mma_load_K_tiles;
  int32_t K_mma_load_K_tiles;
  int32_t V_mma_load_K_tiles;
  bool mma_double_buffer_loads;
  bool optimized_softmax;
  // Since 0.3: the kernel family, and the Hopper family's knobs. The family's other knobs reuse
  // the fields above: B_r = 64 per consumer warpgroup, n_warps = 4 per warpgroup (one producer
  // warpgroup plus the consumers), B_c the keys per pipeline stage; the mma.sync booleans and
  // load granularities are 0 there.
  int32_t family = 0;  // Family::kMmaSync or Family::kSm90
  int32_t stages = 0;  // sm90: K/V pipeline stages in shared memory (2 to 4); mma.sync: 0
  bool overlap = false;  // sm90: softmax overlapped with the next block's wgmma; mma.sync: false
  bool pingpong = false;  // sm90, two consumers: they take turns issuing wgmma; mma.sync: false
  bool persistent = false;  // sm90: one block per SM walks the tiles; mma.sync: false

  // Lexicographic over the fields in declaration order, false < true: the seed's operator<.
  constexpr auto operator<=>(KernelConfig const&) const = default;

  constexpr int64_t threads() const { return int64_t(n_warps) * 32; }
  // mma.sync: Q, K and V tiles, single-buffered; O is staged in Q's region. sm90: the Q tile,
  // `stages` K and V tiles, 1024 bytes to align them for the 128-byte swizzle, and the
  // pipeline's mbarriers (Q full and empty, K and V full and empty per stage: sm90/tile.cuh's
  // Tile::kSmemBytes). In int64: the rules evaluate it
  // on unvalidated configs, whose fields can be anything.
  constexpr int64_t smem_bytes() const {
    if (family == 1) {
      return 1024 + (int64_t(B_r) + 2 * int64_t(stages) * B_c) * d_head * dtype_size(dtype) +
             8 * (2 + 4 * int64_t(stages));
    }
    return (int64_t(B_r) + 2 * int64_t(B_c)) * d_head * dtype_size(dtype);
  }
};

// Values of KernelConfig::family (and fa_kernel_config.family).
enum Family : int32_t { kMmaSync = 0, kSm90 = 1 };

// Hopper's opt-in limit per block (227 KiB); sm_80 allows 163 KiB, checked per device at run time.
inline constexpr int kMaxSmemBytesAnyArch = 227 * 1024;

namespace rules {

constexpr bool is_pow2_or_zero(int n) { return n >= 0 && (n & (n - 1)) == 0; }

// A load granularity n (in 8-column fragments) along a reduction dimension of `extent` columns:
// 0 (whole block) or a power of two other than 1 (ldmatrix.x4 moves 16 columns = 2 fragments at a
// time), at most extent/8, or extent/16 when double-buffered (two loads must fit), and dividing it.
constexpr bool load_tiles_pow2(int n) { return is_pow2_or_zero(n) && n != 1; }
constexpr bool load_tiles_fit(int n, int extent, bool double_buffer) {
  return n <= (double_buffer ? extent / 2 : extent) / 8;
}
// Fields bounded before any arithmetic on them, so no rule overflows on a wild config.
constexpr bool in_range(int32_t v) { return v >= 0 && v <= (1 << 16); }
constexpr bool load_tiles_divide(int n, int extent) { return n == 0 || (extent / 8) % n == 0; }

constexpr bool dtype_ok(KernelConfig const& c) {
  return c.dtype == DType::kFP16 || c.dtype == DType::kBF16;
}
// Shared memory is laid out in 64-column (128-byte) swizzle tiles along d_head.
constexpr bool d_head_ok(KernelConfig const& c) {
  return c.d_head > 0 && c.d_head <= 256 && c.d_head % 64 == 0;
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
constexpr bool smem_ok(KernelConfig const& c) { return c.smem_bytes() <= kMaxSmemBytesAnyArch; }

constexpr bool fields_in_range(KernelConfig const& c) {
  return in_range(c.d_head) && in_range(c.B_r) && in_range(c.B_c) && in_range(c.n_warps) &&
         in_range(c.Q_mma_load_K_tiles) && in_range(c.K_mma_load_K_tiles) &&
         in_range(c.V_mma_load_K_tiles) && in_range(c.stages);
}

// ---- The sm90 family ----
constexpr bool family_ok(KernelConfig const& c) {
  return c.family == kMmaSync || c.family == kSm90;
}
// The mma.sync family has none of the sm90 knobs.
constexpr bool mma_sync_stages_ok(KernelConfig const& c) {
  return c.stages == 0 && !c.overlap && !c.pingpong && !c.persistent;
}
// The mma.sync knobs do not exist in the sm90 family: all 0, so one config names one kernel.
constexpr bool sm90_no_mma_sync_knobs(KernelConfig const& c) {
  return !c.async_copy && !c.eager_load_blocks && !c.swizzled && c.Q_mma_load_K_tiles == 0 &&
         c.K_mma_load_K_tiles == 0 && c.V_mma_load_K_tiles == 0 && !c.mma_double_buffer_loads &&
         !c.optimized_softmax;
}
// One producer warpgroup and 1 to 3 consumer warpgroups (the register split of
// sm90/tile.cuh's Tile for each count).
constexpr bool sm90_warps_ok(KernelConfig const& c) {
  return c.n_warps == 8 || c.n_warps == 12 || c.n_warps == 16;
}
// Each consumer warpgroup owns one m64 wgmma row slab.
constexpr bool sm90_B_r_ok(KernelConfig const& c) { return c.B_r == 16 * (c.n_warps - 4); }
// S = Q K^T is one m64nB_c wgmma per k16 step: N a multiple of 16 (P V steps 16 keys at a time)
// from 64 to 256 (the wgmma shapes generate_wgmma.py emits).
constexpr bool sm90_B_c_ok(KernelConfig const& c) {
  return c.B_c >= 64 && c.B_c <= 256 && c.B_c % 16 == 0;
}
constexpr bool sm90_stages_ok(KernelConfig const& c) { return c.stages >= 2 && c.stages <= 4; }
// Ping-pong alternates the wgmma issue of exactly two consumer warpgroups.
constexpr bool sm90_pingpong_ok(KernelConfig const& c) { return !c.pingpong || c.n_warps == 12; }
// Per consumer thread the S accumulators (B_c / 2 floats), P (B_c / 4 packed pairs) and O
// (d_head / 2 floats) stay in registers, within the reallocated budget (240 with 2 consumer
// warpgroups, 160 with 3, 256 with 1) less 24 for addresses, row statistics and indices.
constexpr int sm90_consumer_regs(KernelConfig const& c) {
  return c.n_warps == 8 ? 256 : c.n_warps == 12 ? 240 : 160;
}
constexpr bool sm90_registers_ok(KernelConfig const& c) {
  return int64_t(c.B_c) * 3 / 4 + c.d_head / 2 <= sm90_consumer_regs(c) - 24;
}

constexpr bool all(KernelConfig const& c) {
  if (!fields_in_range(c) || !family_ok(c) || !dtype_ok(c) || !d_head_ok(c)) return false;
  if (c.family == kSm90) {
    return sm90_no_mma_sync_knobs(c) && sm90_warps_ok(c) && sm90_B_r_ok(c) && sm90_B_c_ok(c) &&
           sm90_stages_ok(c) && sm90_pingpong_ok(c) && sm90_registers_ok(c) && smem_ok(c);
  }
  return mma_sync_stages_ok(c) && n_warps_ok(c) && B_r_ok(c) && B_c_ok(c) && copy_rows_ok(c) &&
         Q_tiles_ok(c) && K_tiles_ok(c) && V_tiles_ok(c) && QK_tiles_match(c) && smem_ok(c);
}

}  // namespace rules

// The config that compiles to the same code as `c` and stands for it in the registry (the
// generator registers only canonical configs). Three fields can be no-ops:
//   - K loaded d_head/8 fragments at a time is the whole block, as K = 0 (when Q is resident; a
//     streamed Q reloads per block and differs);
//   - V loaded B_c/8 fragments at a time is the whole block, as V = 0;
//   - double buffering changes nothing when neither GEMM loads in more than one group.
constexpr KernelConfig canonical(KernelConfig c) {
  if (c.family != kMmaSync) return c;  // every sm90 knob changes the code
  // int64: the config may be unvalidated.
  int64_t const k8 = int64_t(c.K_mma_load_K_tiles) * 8, v8 = int64_t(c.V_mma_load_K_tiles) * 8;
  if (c.Q_mma_load_K_tiles == 0 && k8 == c.d_head) c.K_mma_load_K_tiles = 0;
  if (v8 == c.B_c) c.V_mma_load_K_tiles = 0;
  bool const qk_groups = c.K_mma_load_K_tiles != 0 && k8 < c.d_head;
  bool const pv_groups = c.V_mma_load_K_tiles != 0 && v8 < c.B_c;
  if (!qk_groups && !pv_groups) c.mma_double_buffer_loads = false;
  return c;
}

// The first broken rule, worded for a user; empty when the config is valid.
std::string validate(KernelConfig const& c);

// The seed's should_autotune_config: empty when the filter keeps the config, else the rule that
// dropped it.
std::string autotune_filter(KernelConfig const& c);

// "(BF16, 128, 128, 64, 4): async+eager+swizzled+load_2_2_0_tiles+buffer" (mma.sync) or
// "(BF16, 128, 128, 128, 12): sm90+stages_2" (sm90)
std::string short_name(KernelConfig const& c);

// "FP16", "BF16" or "FP32".
char const* dtype_name(DType t);

// Parses short_name()'s format. On failure returns false and sets *error to what failed.
bool parse_short_name(std::string_view text, KernelConfig* out, std::string* error);

}  // namespace fa
