// The kernels' tuning knobs (the seed's kernel-config struct, with the kernel family and the
// Hopper family's knobs since 0.3), the rules every family keeps, and what dispatches to the
// family's own (core/family_config.hpp): validity, canonical form, the seed's autotune filter and
// the short-form name.
//
// KernelConfig is both the registry's std::map key and the kernel template's non-type template
// parameter, so the rules are constexpr: the templates static_assert them, and the C API reports
// the same rules with their reasons at run time (core/kernel_config_text.hpp: the names and
// reasons in words, apart so that the kernel files, which include this header, parse no
// <string>: with the other headers they no longer parse, an empty kernel file compiles in
// 2.6-3.7 s instead of 5.6).
#pragma once

#include <compare>
#include <cstdint>

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
  int32_t family = 0;  // FA_FAMILY_*: whose rules apply (src/cuda/<family>/config.hpp)
  int32_t stages = 0;  // sm90: K/V pipeline stages in shared memory (2 to 4); mma.sync: 0
  bool overlap = false;  // sm90: softmax overlapped with the next block's wgmma; mma.sync: false
  bool pingpong = false;  // sm90, two consumers: they take turns issuing wgmma; mma.sync: false
  bool persistent = false;  // sm90: one block per SM walks the tiles; mma.sync: false

  // Lexicographic over the fields in declaration order, false < true: the seed's operator<.
  constexpr auto operator<=>(KernelConfig const&) const = default;

  constexpr int64_t threads() const { return int64_t(n_warps) * 32; }
  // Shared memory of one block: the family's formula (its config.hpp); 0 for a family the
  // library does not know (validate() refuses it). In int64: the rules evaluate it on
  // unvalidated configs, whose fields can be anything.
  int64_t smem_bytes() const;
};

// Hopper's opt-in limit per block (227 KiB); sm_80 allows 163 KiB, checked per device at run time.
inline constexpr int kMaxSmemBytesAnyArch = 227 * 1024;

// The rules every family keeps; each family's own are in src/cuda/<family>/config.hpp, which its
// kernel templates static_assert and validate() reports through the family table
// (core/family_config.hpp).
namespace rules {

// Fields bounded before any arithmetic on them, so no rule overflows on a wild config.
constexpr bool in_range(int32_t v) { return v >= 0 && v <= (1 << 16); }
constexpr bool fields_in_range(KernelConfig const& c) {
  return in_range(c.d_head) && in_range(c.B_r) && in_range(c.B_c) && in_range(c.n_warps) &&
         in_range(c.Q_mma_load_K_tiles) && in_range(c.K_mma_load_K_tiles) &&
         in_range(c.V_mma_load_K_tiles) && in_range(c.stages);
}
// FP8 e4m3 kernels (e4m3 Q, K and V) exist in the sm90 family only: its rules and the mma.sync
// family's say so (src/cuda/<family>/config.hpp).
constexpr bool dtype_ok(KernelConfig const& c) {
  return c.dtype == DType::kFP16 || c.dtype == DType::kBF16 || c.dtype == DType::kE4M3;
}
// Shared memory is laid out in 64-column (128-byte) swizzle tiles along d_head.
constexpr bool d_head_ok(KernelConfig const& c) {
  return c.d_head > 0 && c.d_head <= 256 && c.d_head % 64 == 0;
}
constexpr bool common_ok(KernelConfig const& c) {
  return fields_in_range(c) && dtype_ok(c) && d_head_ok(c);
}

}  // namespace rules

// The config that compiles to the same code as `c` and stands for it in the registry (the
// generator registers only canonical configs): the family's (its config.hpp); `c` itself for a
// family the library does not know.
KernelConfig canonical(KernelConfig c);

// "FP16", "BF16" or "FP32".
char const* dtype_name(DType t);

}  // namespace fa
