// The sm90 family's kernel configs, host only (the CPU-only build validates and names them too):
// the validity rules its kernel templates static_assert (launch.cuh), its shared memory (which
// launch.cuh checks against tile.cuh's Tile::kSmemBytes), and, in config.cpp, the reasons for its
// rules and its knobs' tokens in a kernel name (its answers to core/family_config.hpp).
#pragma once

#include <cstdint>
#include <numeric>

#include "core/kernel_config.hpp"
#include "flashattn.h"

namespace fa {
struct FamilyConfig;  // core/family_config.hpp, which config.cpp includes: the kernel files
                      // include this header, and that one's <string> and <vector> would cost
                      // each of them about 2 s of compile time (core/kernel_config.hpp)
}  // namespace fa

namespace fa::cuda::sm90 {

inline constexpr int32_t kId = FA_FAMILY_SM90;

// The pipeline without O's buffer: the Q tile, `stages` K tiles of d_head columns and V tiles
// of `v_cols` columns, 1024 bytes to align them for the 128-byte swizzle, and the mbarriers (Q
// full and empty, K and V full and empty per stage).
constexpr int64_t pipe_bytes(KernelConfig const& c, int64_t v_cols) {
  int64_t const q = int64_t(c.B_r) * c.d_head * dtype_size(c.dtype);
  return 1024 + q + int64_t(c.stages) * c.B_c * (c.d_head + v_cols) * dtype_size(c.dtype) +
         8 * (2 + 4 * int64_t(c.stages));
}

// The columns of V (and O) a kernel holds: d_head, or at d 192 128 where V's stages of 192
// columns would not fit in 227 KiB and 128 columns do. Such a kernel runs value head dims up to
// 128 only (family.cpp) and is built for them: DeepSeek's 192 / 128 with 128 keys per block
// (FA3's tile for it), where V padded to 192 columns leaves room for 112 keys at most (B_c 128:
// 241 KiB with V of 192 columns, 209 KiB with 128). Not at d 256: its gather copies whole
// 256-column rows per pass (mainloop_load.cuh), and no 256 / 128 model asks for it.
constexpr int64_t v_cols(KernelConfig const& c) {
  if (c.d_head != 192 || pipe_bytes(c, c.d_head) <= kMaxSmemBytesAnyArch) return c.d_head;
  return pipe_bytes(c, 128) <= kMaxSmemBytesAnyArch ? 128 : c.d_head;
}

// An FP8 kernel's layout (dtype E4M3: e4m3 Q, K and V; tile.cuh): the Q tile and K stages as
// TMA writes them (128-byte-swizzled rows of d_head bytes), V's stages transposed by the
// producer warpgroup into [d_head rows][B_c keys] (wgmma's e4m3 B operand is K-major: the keys
// contiguous) in 8-row groups of 16-byte core matrices without swizzle, the groups
// B_c / 16 * 128 + 16 bytes apart (the 16 spare bytes put the transposing threads' 8-byte stores
// of one instruction in distinct banks: mainloop_load.cuh), then O's staging buffer (below), two
// slots of V as TMA loads it (B_c rows of d_head bytes, unswizzled; none in a tile that copies V's
// images, e4m3_images_only), and after them the pipeline's barriers and each slot's "full" and
// "empty" mbarrier.
// Each V stage is rounded up to 128 bytes and the stages' end to 1024, so that O's staging buffer
// after them starts on a 128-byte swizzle atom (TMA stores it from there); that buffer holds B_r
// rows of O in its 16-bit type where it fits beside the raw V slots.
constexpr int64_t e4m3_vt_group_bytes(int64_t b_c) { return b_c / 16 * 128 + 16; }
// The image of one V stage (d_head / 8 groups, without the stage's rounding to 128 bytes) as a
// dense or varlen FP8 problem's V is transposed ahead of the run into the workspace
// (v_images.cuh), one per key block of each (sequence, K/V head); the producer copies it into the
// stage in one bulk copy.
constexpr int64_t e4m3_v_image_bytes(KernelConfig const& c) {
  return int64_t(c.d_head) / 8 * e4m3_vt_group_bytes(c.B_c);
}
// An FP8 tile whose consumers' S, P and O take more than 176 registers leaves too few beside
// them under the transposing producer's 56 (its consumers' 224: d 128 with 192 keys, 184 and
// Q's 16, spilled 32-60 bytes and ran 0.83-0.91x the 128-key tile from 2k keys; H200,
// docs/performance.md): its producer warpgroup keeps 24 and only copies (K by TMA, each V stage
// from its image), its consumers get 240 (FA3's split for its FP8 tiles), and it holds no raw V
// slots. It runs only problems whose V is transposed ahead of the run (family.cpp); a plan falls
// back to a transposing tile for a run without the workspace that holds the images.
constexpr bool e4m3_images_only(KernelConfig const& c) {
  return c.dtype == DType::kE4M3 && int64_t(c.B_c) / 2 + c.B_c / 8 + c.d_head / 2 > 176;
}
constexpr int64_t e4m3_pipe_bytes(KernelConfig const& c) {
  int64_t const vt = (int64_t(c.d_head) / 8 * e4m3_vt_group_bytes(c.B_c) + 127) / 128 * 128;
  int64_t const stages =
      int64_t(c.B_r) * c.d_head + int64_t(c.stages) * (int64_t(c.B_c) * c.d_head + vt);
  return 1024 + (stages + 1023) / 1024 * 1024 + 8 * (2 + 4 * int64_t(c.stages));
}
constexpr int64_t e4m3_o_bytes(KernelConfig const& c) {
  int64_t const o = int64_t(c.B_r) * c.d_head * 2;
  int64_t const slots = e4m3_images_only(c) ? 0 : 2 * (int64_t(c.B_c) * c.d_head + 16);
  return e4m3_pipe_bytes(c) + o + slots <= kMaxSmemBytesAnyArch ? o : 0;
}
constexpr int64_t e4m3_v_slots(KernelConfig const& c) {
  if (e4m3_images_only(c)) return 0;
  int64_t const slot = int64_t(c.B_c) * c.d_head + 16;
  return e4m3_pipe_bytes(c) + e4m3_o_bytes(c) + 2 * slot <= kMaxSmemBytesAnyArch ? 2 : 1;
}

// The pipeline and O's staging buffer (B_r rows) at d 128 where it fits in 227 KiB (tile.cuh's
// Tile::kSmemBytes); an FP8 kernel's own layout (its O buffer in O's 16-bit type, above).
constexpr int64_t smem_bytes(KernelConfig const& c) {
  if (c.dtype == DType::kE4M3) {
    return e4m3_pipe_bytes(c) + e4m3_o_bytes(c) +
           e4m3_v_slots(c) * (int64_t(c.B_c) * c.d_head + 16);
  }
  int64_t const q = int64_t(c.B_r) * c.d_head * dtype_size(c.dtype);
  int64_t const pipe = pipe_bytes(c, v_cols(c));
  return pipe + (c.d_head == 128 && pipe + q <= kMaxSmemBytesAnyArch ? q : 0);
}

// An e4m3 (FP8) K/V cache (fp8_kv_tile kernels' e4m3 instantiations, tile.cuh): the same layout
// with O's staging buffer given up (its rows are stored by the threads) and, after the
// barriers, e4m3 stages that TMA fills and the producer warpgroup converts into the 16-bit K
// and V stages (V's alone in the plain instantiation of e4m3_keys kernels, whose K goes by TMA
// straight into its 16-bit stages): two per tensor where they fit in 227 KiB, else one, B_c x
// d_head bytes each, with a "full" and an "empty" mbarrier apiece.
constexpr int64_t e4m3_slots(KernelConfig const& c) {
  int64_t const slot = 2 * (int64_t(c.B_c) * c.d_head + 16);
  return pipe_bytes(c, v_cols(c)) + 2 * slot <= kMaxSmemBytesAnyArch ? 2 : 1;
}
constexpr int64_t e4m3_smem_bytes(KernelConfig const& c) {
  return pipe_bytes(c, v_cols(c)) + e4m3_slots(c) * 2 * (int64_t(c.B_c) * c.d_head + 16);
}

// The tile a config's narrow pairs (narrow.hpp) compile as: a 16-bit config below d 192
// without `persistent` runs them on its persistent twin's code (the same tile with its tile
// loop), launched one block per query tile (family.cpp's schedule), so each block's loop runs one
// round; the two differ in nothing else there (tile.cuh: kOInQ, O staged in the Q tile, is d 192
// and 256's one-tile blocks'). The twins then share their pairs (tools/generate_kernels.py puts
// them in one file: one compile), and a pad row may name either at no build cost: d 56 on d 64's
// 192-row tile one block per tile ran 1.100x and 1.041x the persistent grid's TFLOP/s at causal
// 4k and 8k (H200, docs/performance.md session 79). The plain and general instantiations keep
// their own code: on the persistent code, d 64 and 128 at causal 4k-16k ran 0.991-1.001x.
constexpr bool pairs_persistent(KernelConfig const& c) {
  return c.persistent || (c.dtype != DType::kE4M3 && c.d_head < 192);
}

// A paged cache's key block is read in TMA boxes of gcd(B_c, page_size) rows (every box within
// one page) or gathered row by row by the producer warpgroup (16-byte cp.async copies,
// mainloop_load.cuh) where a box could not start on a swizzle atom (not a multiple of 8 rows:
// pages of 1, 3, 4, 12, ...). Boxes of 16 rows (pages of 16 at B_c 128: 16 copies per K block
// at d 128) run chunked prefill at 0.81-0.86x the contiguous speed, but gathering those pages
// instead ran at 0.80-0.88x the boxes' speed at d 128 (0.98x at d 256; H200, 4 x 512 against 8k
// and 32k, 4 x 2048 against 16k, 16 x 256 against 8k: docs/performance.md, "Gathered pages:
// whole sectors"), so boxes stay wherever they can. An e4m3 cache is never gathered (its
// producer converts TMA-filled byte stages; family.cpp refuses such page sizes).
constexpr int64_t page_box_rows(int64_t b_c, int64_t page_size) { return std::gcd(b_c, page_size); }
constexpr bool gathers_pages(int64_t b_c, int64_t page_size) {
  return page_box_rows(b_c, page_size) % 8 != 0;
}

namespace rules {

// One producer warpgroup and 1 to 3 consumer warpgroups (the register split of tile.cuh's Tile
// for each count).
constexpr bool warps_ok(KernelConfig const& c) {
  return c.n_warps == 8 || c.n_warps == 12 || c.n_warps == 16;
}
// Each consumer warpgroup owns one m64 wgmma row slab.
constexpr bool B_r_ok(KernelConfig const& c) { return c.B_r == 16 * (c.n_warps - 4); }
// S = Q K^T is one m64nB_c wgmma per k16 step: N a multiple of 16 (P V steps 16 keys at a time)
// from 64 to 256 (the wgmma shapes generate_wgmma.py emits).
constexpr bool B_c_ok(KernelConfig const& c) {
  return c.B_c >= 64 && c.B_c <= 256 && c.B_c % 16 == 0;
}
constexpr bool stages_ok(KernelConfig const& c) { return c.stages >= 2 && c.stages <= 4; }
// Ping-pong alternates the wgmma issue of exactly two consumer warpgroups.
constexpr bool pingpong_ok(KernelConfig const& c) { return !c.pingpong || c.n_warps == 12; }
// Per consumer thread the S accumulators (B_c / 2 floats), P (B_c / 4 packed pairs; e4m3: B_c / 8
// registers of four bytes) and O (v_cols / 2 floats) stay in registers, within the reallocated
// budget less 24 for addresses, row statistics and indices (accumulator_limit): with 2 consumer
// warpgroups 232 up to d 192 where those take 200 or fewer, else 240 (d 256, V in fewer columns
// than d_head), 224 in an FP8 kernel (240 in one whose producer only copies:
// e4m3_images_only); 160 with 3, 256 with 1 (tile.cuh's kConsumerRegs).
constexpr int64_t accumulator_regs(KernelConfig const& c) {
  int64_t const p = c.dtype == DType::kE4M3 ? c.B_c / 8 : c.B_c / 4;
  return int64_t(c.B_c) / 2 + p + v_cols(c) / 2;
}
constexpr int consumer_regs(KernelConfig const& c) {
  if (c.n_warps != 12) return c.n_warps == 8 ? 256 : 160;
  // An FP8 producer transposes V on 56 (tile.cuh), or only copies on 24.
  if (c.dtype == DType::kE4M3) return e4m3_images_only(c) ? 240 : 224;
  bool const wide_producer =
      c.d_head <= 192 && v_cols(c) == c.d_head && accumulator_regs(c) <= 200;
  return wide_producer ? 232 : 240;
}
// The most accumulator registers a tile may take: the consumer's less 24, and in a 16-bit tile
// of two consumer warpgroups at most 200. At 208 (d 128 with 192 keys, on 240) ptxas serialized
// the wgmmas (C7512) and spilled in both instantiations, producer and consumers (52 and 164
// bytes of stores), where every other 16-bit tile of the default build spills 8 bytes at most
// (tools/compile_sm90.py, docs/performance.md session 70); that tile only ever was an
// autotuning candidate.
constexpr int64_t accumulator_limit(KernelConfig const& c) {
  int64_t const budget = consumer_regs(c) - 24;
  return c.n_warps == 12 && c.dtype != DType::kE4M3 && budget > 200 ? 200 : budget;
}
constexpr bool registers_ok(KernelConfig const& c) {
  return accumulator_regs(c) <= accumulator_limit(c);
}
// FP8 kernels (e4m3 Q, K and V): two consumer warpgroups at d 128 or 256 (a row of K is one or
// two 128-byte swizzle blocks; d 64's 64-byte rows would need another swizzle) with B_c of 64,
// 128, 192 or 256 keys, the e4m3 wgmma N that tools/generate_wgmma.py emits for S = Q K^T, and
// two raw V slots in shared memory (the producer loads one while it transposes the other), or
// none in a tile whose producer only copies V's images (e4m3_images_only).
constexpr bool e4m3_ok(KernelConfig const& c) {
  return c.dtype != DType::kE4M3 ||
         (c.n_warps == 12 && (c.d_head == 128 || c.d_head == 256) && c.B_c % 64 == 0 &&
          (e4m3_images_only(c) || e4m3_v_slots(c) == 2));
}
constexpr bool smem_ok(KernelConfig const& c) { return smem_bytes(c) <= kMaxSmemBytesAnyArch; }

// The kernels that also read e4m3 (FP8) K/V caches with 16-bit queries: the two-stage,
// overlapped tiles of two consumer warpgroups without ping-pong, at d 64 and 128 the persistent
// one with 128 keys per block (the causal pick from 4k to 8k keys at both, chunked prefill's
// usual shape), at d 256 the one with 64 and one tile per block (the default build's, its causal
// pick up to 4k: the e4m3 stages fit one per tensor, 230,512 bytes; the persistent one, in
// tuning builds only, has not run on e4m3 caches). At d 192 the tiles' 112 keys leave no room for
// e4m3 stages, and a row's 24 units of 8 bytes do not split evenly over the producer's 128
// threads (mainloop_load.cuh's load_convert_e4m3): those caches run on the mma.sync family. A
// fourth instantiation (and for e4m3_keys, below, a fifth) costs compile time, so not every
// kernel gets one.
constexpr bool fp8_kv_tile(KernelConfig const& c) {
  bool const tile = c.d_head <= 128 ? c.B_c == 128 && c.persistent
                                     : c.d_head == 256 && c.B_c == 64 && !c.persistent;
  return c.dtype != DType::kE4M3 && c.n_warps == 12 && tile && c.stages == 2 && c.overlap &&
         !c.pingpong && e4m3_smem_bytes(c) <= kMaxSmemBytesAnyArch;
}
// Of those, the bf16-query kernels at d 128 and 256 read an e4m3 cache's K as TMA loads it
// (rows of 128-byte swizzle blocks, as an FP8 tile's): S = Q K^T runs on wgmma's e4m3 form
// against each query row held as two e4m3 rows, and the producer converts V alone (tile.cuh's
// kE4M3Keys). d 64's 64-byte rows would need another swizzle; fp16 queries (11 significant
// bits, two e4m3 rows hold 8) keep both tensors converted.
constexpr bool e4m3_keys(KernelConfig const& c) {
  return fp8_kv_tile(c) && c.dtype == DType::kBF16 && c.d_head % 128 == 0;
}

// The family's knobs at their defaults, as in a config of another family.
constexpr bool knobs_unset(KernelConfig const& c) {
  return c.stages == 0 && !c.overlap && !c.pingpong && !c.persistent;
}

// The family's own rules, the common ones holding (validate() also wants the other families'
// knobs unset).
constexpr bool own(KernelConfig const& c) {
  return warps_ok(c) && B_r_ok(c) && B_c_ok(c) && stages_ok(c) && pingpong_ok(c) &&
         e4m3_ok(c) && registers_ok(c) && smem_ok(c);
}

}  // namespace rules

extern FamilyConfig const kConfig;

}  // namespace fa::cuda::sm90
