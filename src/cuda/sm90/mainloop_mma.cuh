// The sm90 family's consumer main loop: one warpgroup's pass over a tile's key blocks, issuing
// S = Q K^T and O += P V on wgmma from the pipeline's stages (Smem), with the softmax between
// them, and releasing each stage when its products are done.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/ptx.cuh"
#include "cuda/sm90/ptx_sm90.cuh"
#include "cuda/sm90/softmax.cuh"
#include "cuda/sm90/tile.cuh"
#include "cuda/sm90/wgmma.cuh"

namespace fa::cuda::sm90 {

// Ping-pong turns: warpgroup 0 waits on barrier 1 and hands over on barrier 2, warpgroup 1 the
// other way round (256 threads each: the 128 that wait and the 128 that hand over). Warpgroup 1
// gives the first turn away (start); warpgroup 0 takes the last hand-over after its final tile
// (finish), so every barrier phase completes before the block exits. No-ops without ping-pong.
template <class T>
struct Turns {
  int wg;
  __device__ __forceinline__ void take() const {
    if constexpr (T::kPingpong) named_sync(1 + wg, 256);
  }
  __device__ __forceinline__ void pass() const {
    if constexpr (T::kPingpong) named_arrive(2 - wg, 256);
  }
  __device__ __forceinline__ void start() const {
    if constexpr (T::kPingpong) {
      if (wg == 1) named_arrive(1, 256);
    }
  }
  __device__ __forceinline__ void finish() const {
    if constexpr (T::kPingpong) {
      if (wg == 0) named_sync(1, 256);
    }
  }
};

// bf16 queries against an e4m3 cache (kernel.cuh's kE4M3 instantiation, whose products run in
// fp16; ptx.cuh's bf16x8_to_fp16 says how and why): once per tile, after Q's TMA has landed,
// the consumer warpgroup rewrites its 64 rows of the Q tile in place as fp16 rows times powers
// of two, and returns 2^k for the thread's rows r0 and r0 + 8 (their scores' factor). With the
// bf16 conversions in the key loop the queries ran at 0.63-0.71x the 16-bit cache's speed where
// fp16 queries ran at 0.90-0.94x. The quad holding a row in the accumulator layout converts it,
// a quarter of its 16-byte chunks each: in place, so the swizzle plays no part. Then the stores
// are fenced for the async proxy (wgmma reads the tile) and the warpgroup meets on its named
// barrier.
template <class T>
__device__ __forceinline__ void q_bf16_to_fp16(uint8_t* q_tile, int wg, int r0, int lane,
                                               float (&row_scale)[2]) {
  constexpr int kChunks = T::kD / 8 / 4;  // 16-byte chunks of a row per thread: 4 at d 128
  uint32_t const tile = smem_addr(q_tile);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    int const row = wg * 64 + r0 + 8 * r;
    uint32_t at[kChunks];
    uint4 x[kChunks];
    float mx = 0.f;
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      int const chunk = lane % 4 + 4 * j;  // the row's chunks: 8 per 64-column block
      at[j] = tile + uint32_t((chunk / 8) * T::kBr * 128 + row * 128 + (chunk % 8) * 16);
      x[j] = ptx::ld_shared_16(at[j]);
      mx = ptx::bf16x8_abs_max(x[j], mx);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    int const k = ptx::bf16_row_exponent(mx);
    float const down = ptx::pow2(-k);
    row_scale[r] = ptx::pow2(k);
#pragma unroll
    for (int j = 0; j < kChunks; ++j) ptx::st_shared_16(at[j], ptx::bf16x8_to_fp16(x[j], down));
  }
  fence_proxy_async_shared();
  warpgroup_sync(wg);
}

// bf16 queries against an e4m3 cache whose K the products read as loaded (Tile::kE4M3Keys):
// S = Q K^T runs on wgmma's e4m3 form, so once per tile, after Q's TMA has landed, the consumer
// warpgroup rewrites each of its 64 query rows in place as two e4m3 rows, hi and lo, and
// returns 2^k for the thread's rows r0 and r0 + 8: with x = q 2^-k, its largest magnitude in
// [128, 256), hi = x rounded to e4m3 and lo = x - hi rounded to e4m3, so q = 2^k (hi + lo). A
// bf16 value's 8 significant bits are hi's 4 and the exact difference's at most 4, a multiple
// of x's last bit: exact wherever that bit is at least e4m3's subnormal step 2^-9, i.e. for x
// of 2^-2 or more, every value down to 2^-9 of its row's largest; smaller ones off by at most
// 2^-10, 2^-17 of the largest. hi takes the tile's first kD / 128 column blocks of 128 bytes, lo
// the last (a bf16 row's 2 kD bytes, swizzled as an FP8 tile's Q): each quad reads its row's
// bytes before it writes them (the quad's shuffles of the row maximum, then a __syncwarp).
template <class T>
__device__ __forceinline__ void q_bf16_to_e4m3_pair(uint8_t* q_tile, int wg, int r0, int lane,
                                                    float (&row_scale)[2]) {
  static_assert(T::kType == DType::kBF16 && T::kD % 128 == 0, "bf16 rows of 128-byte blocks");
  constexpr int kChunks = T::kD / 8 / 4;  // 16-byte chunks of a bf16 row per thread: 4 at d 128
  constexpr uint32_t kBlock = T::kBr * 128;           // a column block of the tile
  constexpr uint32_t kLo = T::kD / 128 * kBlock;      // lo's first column block
  uint32_t const tile = smem_addr(q_tile);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    int const row = wg * 64 + r0 + 8 * r;
    uint4 x[kChunks];
    float m = 0.f;
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      int const chunk = lane % 4 + 4 * j;  // as stored: 8 per 64-column block
      x[j] = ptx::ld_shared_16(tile + uint32_t((chunk / 8) * kBlock + row * 128 + (chunk % 8) * 16));
      m = ptx::bf16x8_abs_max(x[j], m);
    }
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
    __syncwarp();  // the quad's reads of the row before its writes
    int const k = ptx::bf16_row_exponent(m, 7);
    float const down = ptx::pow2(-k);
    // A row holding an infinity (m: fmaxf passes over NaN) scores NaN: e4m3's conversion
    // saturates at 448, which would leave its scores finite where bf16's are not.
    row_scale[r] = m <= 3.402823466e38f ? ptx::pow2(k) : __int_as_float(0x7fc00000);
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      int const chunk = lane % 4 + 4 * j;
      // The stored chunk's 8 values: logical chunk `at` of the row (the swizzle XORs row % 8).
      int const at = (chunk / 8) * 8 + ((chunk % 8) ^ (row % 8));
      uint32_t const w[4] = {x[j].x, x[j].y, x[j].z, x[j].w};
      float v[8];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        v[2 * e] = __uint_as_float(w[e] << 16) * down;
        v[2 * e + 1] = __uint_as_float(w[e] & 0xffff0000u) * down;
      }
      uint32_t hi[2], lo[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float const* u = v + 4 * h;
        hi[h] = ptx::e4m3x4_from(u[0], u[1], u[2], u[3]);
        uint2 const back = ptx::e4m3x4_to<__half>(hi[h]);
        float2 const b0 = __half22float2(*reinterpret_cast<__half2 const*>(&back.x));
        float2 const b1 = __half22float2(*reinterpret_cast<__half2 const*>(&back.y));
        lo[h] = ptx::e4m3x4_from(u[0] - b0.x, u[1] - b0.y, u[2] - b1.x, u[3] - b1.y);
      }
      // Values 8 at .. 8 at + 7: bytes (at % 2) * 8 on of e4m3 chunk (at % 16) / 2 of column
      // block at / 16.
      uint32_t const to = tile + uint32_t((at / 16) * kBlock + row * 128 +
                                          ((((at % 16) / 2) ^ (row % 8)) << 4) + (at % 2) * 8);
      asm volatile("st.shared.v2.b32 [%0], {%1, %2};" ::"r"(to), "r"(hi[0]), "r"(hi[1])
                   : "memory");
      asm volatile("st.shared.v2.b32 [%0], {%1, %2};" ::"r"(to + kLo), "r"(lo[0]), "r"(lo[1])
                   : "memory");
    }
  }
  fence_proxy_async_shared();
  warpgroup_sync(wg);
}

// A pipeline position's stage and phase, stepped by one key block at a time: at d 64 and 128
// incrementally (the 64-bit position's modulo and division per block took a dozen instructions at
// 3 stages); at d 192 and 256 from the position, as before (see consume_tile).
template <class T>
struct Slot {
  static constexpr bool kStepped = T::kD <= 128;
  int64_t pos;  // kept current at d 192 and 256 only
  int stage;
  uint32_t phase;
  __device__ __forceinline__ explicit Slot(int64_t pipe)
      : pos(pipe), stage(int(pipe % T::kStages)), phase(uint32_t(pipe / T::kStages) & 1) {}
  __device__ __forceinline__ Slot next() const {
    if constexpr (!kStepped) return Slot(pos + 1);
    Slot n = *this;
    if (++n.stage == T::kStages) {
      n.stage = 0;
      n.phase ^= 1;
    }
    return n;
  }
};

// Whether consume_tile steps a block's wgmma descriptors (below) for products in kMma: at
// d <= 128, and at d 192 and 256 in 16-bit tiles whose products are their own type, where
// kernel.cuh then takes the warpgroup through a shuffle too (so Q's are uniform). Past d 128 the
// FP8 tile (e4m3 products, d 256) compiles the same way but has not run so: it keeps per-step
// descriptors. (A d 256 tile reading an e4m3 cache runs fp16 products, P V and with fp16
// queries S = Q K^T too: stepped for fp16 queries, per step for bf16 ones, whose S = Q K^T in
// the plain instantiation is e4m3: kE4M3Keys below.)
template <class T, DType kMma>
inline constexpr bool kStepDescriptors =
    T::kD <= 128 || (kMma == T::kType && kMma != DType::kE4M3);

// Where kStepDescriptors holds, each block's wgmma descriptors are built once and stepped by
// constant offsets per k16 step (the start address field, bits 0-13, holds address / 16 of a
// window under 256 KiB, so adding offset / 16 never carries out of it): rebuilding one from its
// address per step took 4-5 uniform-datapath instructions, 18% of the instructions issued at
// d 128, 16k (ncu, H200); stepped at d 64 and 128, the FA-paper grid ran 1.009x (d 64 at 8k-16k
// 1.05-1.06x, no point under 0.986x; H200). At d 256 the step cost 12 instructions between two
// of S = Q K^T's 16 HGMMAs (K's descriptor rebuilt on the uniform datapath, Q's on the vector
// pipe and moved by R2UR; FA4: 3-4), 585 warp instructions per key block against FA4's 503 in
// the same tile (ncu source counters, causal 4k). Stepped there as at d 128, ptxas hoisted Q's
// sixteen loop-invariant descriptors out of the key loop and spilled (the ping-pong pick 8 ->
// 40 bytes of stores; earlier, 3-7% slower), so d 256 takes Q's address through an opaque move
// per block (d 192 too): 2 instructions between HGMMAs, every kernel's spills at or under
// per-step descriptors' (fp16 d 256: 1056 -> 924 bytes over 85 kernels; bf16 d 192: 232 -> 216
// over 83), and on the FA-paper grid's points (H200) bf16 d 256 1.020x (1.001-1.037), fp16 d 256
// with its d 256 rows re-derived 1.031x (1.002-1.052), d 192 and 192 / 128 1.018x bf16
// (0.997-1.040) and 1.020x fp16 (0.996-1.061). Stepped at d 192 without the move: 0.9999x.
//
// kQkSteps and kVCols: the k16 steps of S = Q K^T and the columns of O += P V that the problem's
// head dims need, T::kD / 16 and T::kDv but in a narrow pair's instantiation (narrow.hpp), whose
// Q, K and V columns past them are zeros. Compile-time: a runtime bound inside the unrolled
// loops made ptxas fence every wgmma (C7519, 126 times in one file) and spill in the consumers.
//
// kMma: the products' element type, T::kType but in the e4m3 instantiations, whose V stages hold
// fp16 for either query type (and K's and the Q tile but with kE4M3Keys; kernel.cuh). An FP8
// tile (kMma E4M3) steps S = Q K^T by
// k32 (32 bytes, as the 16-bit k16 steps) and reads its V stages transposed (tile.cuh), P V by
// k32 steps of P's e4m3 registers (to_p).
//
// kE4M3Keys (the e4m3 instantiation of a Tile::kE4M3Keys tile): K's stages hold e4m3 rows as
// loaded and the Q tile each row's two e4m3 rows (q_bf16_to_e4m3_pair), so S = Q K^T is
// kD / 32 k32 steps of two e4m3 products each, hi's then lo's (as many tensor-core cycles as the
// fp16 one's kD / 16 k16 steps); P V stays fp16.
template <class T, int kQkSteps, int kVCols, DType kMma, bool kE4M3Keys = false, class Softmax>
__device__ __forceinline__ void consume_tile(Smem<T> const& sm, uint32_t q_base, int64_t pipe,
                                             int n_blocks, int lane, Turns<T> const& turns,
                                             float (&o)[T::kDv / 2], Softmax&& softmax) {
  static_assert(kQkSteps <= T::kQkSteps && kVCols <= T::kDv && kVCols % 8 == 0, "narrower dims");
  constexpr bool kFp8 = kMma == DType::kE4M3;
  static_assert(kFp8 == T::kFp8, "e4m3 products on an FP8 tile");
  constexpr bool kStepped = kStepDescriptors<T, kMma>;
  // A narrow pair of a d 128 ping-pong kernel (80, 96, 112 columns) issues S = Q K^T last k16
  // step first. In step order ptxas kept the slot's stage, and so every K and V descriptor, in
  // vector registers, with an R2UR before 15 of the 20-26 HGMMAs past each group's first (23 of
  // 30-34 in the 192-key kernel; tools/check_sass.py); reversed, none, and d 72-112 without a
  // mask at 4k-16k ran 1.01-1.09x (H200). Elsewhere the order stays: d 64's pairs had no R2UR
  // and ran 0.98-1.01x reversed, d 200-224's 0.98-1.01x, and d 128's 112-column pair in the
  // persistent kernel without ping-pong spilled 16 bytes (none in step order). bf16 and fp16
  // alike (FP8 tiles have no narrow pairs): fp16's pairs had the same R2URs (tools/check_sass.py).
  constexpr bool kReversed = !T::kFp8 && T::kD == 128 && T::kPingpong && kQkSteps < T::kQkSteps;
  // A k16 step's descriptor of the operand at `base` (a 1024-aligned tile), `offset` bytes in.
  auto desc = [](uint64_t built, uint32_t base, uint32_t offset, uint32_t lbo) {
    return kStepped ? built + offset / 16 : make_desc_sw128(base + offset, lbo, 1024);
  };
  // An FP8 tile's S = Q K^T takes Q's first 128 columns from registers (wgmma's A in registers,
  // K from shared memory): its warpgroup's 64 rows, loaded once per tile by one ldmatrix.x4 per
  // k32 step (matrices rows +0 and +8 of the warp's 16, bytes 0-15 and 16-31 of the step: the A
  // layout, four bytes of a row per register). With both operands from shared memory every key
  // block reads Q again, as many bytes as K at d 256's 64 keys per block, where a kernel that
  // skipped S = Q K^T ran 1.28x (d 128: 1.05x; 8k, H200). Q's first 128 columns in registers:
  // d 256 1.04-1.06x at 8k-16k, d 128 unchanged. All of d 256's Q (32 registers) left ptxas too
  // few for its S, P and O: it serialized the wgmmas (C7512). Only where S, P, O and those 16
  // registers leave 24 of the consumer's (not d 256 with 128 keys: 208 + 16 of 240).
  constexpr bool kQInRegs =
      kFp8 && T::kBc / 2 + T::kPRegs + T::kDv / 2 + 16 <= T::kConsumerRegs - 24;
  constexpr int kQRegSteps = kQInRegs ? (kQkSteps < 4 ? kQkSteps : 4) : 0;
  // kE4M3Keys at d 128: the hi rows' A operand in registers, loaded once per tile as an FP8
  // tile's Q (the lo rows' from shared memory: both in registers spilled 16 bytes).
  constexpr bool kHiInRegs = kE4M3Keys && T::kD == 128;
  // The A operand of the first `steps` k32 steps of the e4m3 rows at q_base, loaded as the
  // kQInRegs note above says.
  auto load_a = [&](auto& a, auto steps) {
    if (n_blocks > 0) {
      int const j = lane / 8, warp = (threadIdx.x / 32) % 4;
      uint32_t const row_at = q_base + uint32_t((16 * warp + 8 * (j & 1) + lane % 8) * 128);
#pragma unroll
      for (int kk = 0; kk < decltype(steps)::value; ++kk) {
        int const chunk = 2 * kk + j / 2;  // of the row's first 128 bytes, swizzled
        ptx::ldmatrix_x4(a[kk], row_at + uint32_t((chunk ^ (lane % 8)) * 16));
      }
    }
  };
  uint32_t qa[kQRegSteps > 0 ? kQRegSteps : 1][4];
  if constexpr (kFp8) load_a(qa, std::integral_constant<int, kQRegSteps>{});
  uint32_t qh[kHiInRegs ? 4 : 1][4];
  if constexpr (kHiInRegs) load_a(qh, std::integral_constant<int, 4>{});
  // Issues S = Q K^T for the key block in `slot` into `sc` (committed, not waited for).
  auto issue_qk = [&](Slot<T> slot, float(&sc)[T::kBc / 2]) {
    uint32_t const k_base = smem_addr(sm.k_tiles) + slot.stage * T::kKVBytes;
    // Q's address afresh each block where ptxas would hold its descriptor (64 bits) across
    // the key loop: FP8 d 256 with 128 keys, whose general instantiation spilled it (8 of its
    // 20 bytes of spill stores; per-tile values of the epilogue the rest, gone with it too).
    uint32_t const q_at =
        (kStepped && T::kD > 128) || (kFp8 && !kQInRegs) ? opaque(q_base) : q_base;
    uint64_t const qd = make_desc_sw128(q_at, 16, 1024);
    uint64_t const kd = make_desc_sw128(k_base, 16, 1024);
    mbar_wait(&sm.k_full[slot.stage], slot.phase);
    wgmma_fence();
    if constexpr (kE4M3Keys) {
      constexpr uint32_t kLo = T::kD / 128 * T::kBr * 128;  // lo's rows (q_bf16_to_e4m3_pair)
#pragma unroll
      for (int kk = 0; kk < T::kD / 32; ++kk) {
        uint32_t const qo = (kk / 4) * T::kBr * 128 + (kk % 4) * 32;
        uint64_t const db = desc(kd, k_base, (kk / 4) * T::kBc * 128 + (kk % 4) * 32, 16);
        if constexpr (kHiInRegs) {
          Wgmma<DType::kE4M3, T::kBc, Operands::kRS, 0>::run(sc, qh[kk], db, kk > 0);
        } else {
          Wgmma<DType::kE4M3, T::kBc, Operands::kSS, 0>::run(sc, desc(qd, q_at, qo, 16), db,
                                                              kk > 0);
        }
        Wgmma<DType::kE4M3, T::kBc, Operands::kSS, 0>::run(sc, desc(qd, q_at, kLo + qo, 16), db,
                                                            1);
      }
    } else {
#pragma unroll
      for (int jj = 0; jj < kQkSteps; ++jj) {
        int const kk = kReversed ? kQkSteps - 1 - jj : jj;
        uint64_t const da = desc(qd, q_at, (kk / 4) * T::kBr * 128 + (kk % 4) * 32, 16);
        uint64_t const db = desc(kd, k_base, (kk / 4) * T::kBc * 128 + (kk % 4) * 32, 16);
        if constexpr (kFp8) {
          if (kk < kQRegSteps) {
            Wgmma<kMma, T::kBc, Operands::kRS, 0>::run(sc, qa[kk], db, jj > 0);
          } else {
            Wgmma<kMma, T::kBc, Operands::kSS, 0>::run(sc, da, db, jj > 0);
          }
        } else {
          Wgmma<kMma, T::kBc, Operands::kSS, 0>::run(sc, da, db, jj > 0);
        }
      }
    }
    wgmma_commit();
  };
  // Issues O += P V for the key block in `slot` (committed, not waited for).
  auto issue_pv = [&](Slot<T> slot, uint32_t const(&pk)[T::kPRegs]) {
    uint32_t const v_base = smem_addr(sm.v_tiles) + slot.stage * T::kVBytes;
    // 16-bit: V as loaded, N-major (16 keys = 16 rows of 128 bytes per k16 step). FP8: V
    // transposed, K-major core matrices 128 bytes apart along the keys (two per k32 step).
    uint64_t const vd = kFp8 ? make_desc_none(v_base, 128, T::kVtGroupBytes)
                             : make_desc_sw128(v_base, T::kBc * 128, 1024);
    mbar_wait(&sm.v_full[slot.stage], slot.phase);
    // O's rescaling and P's packing are finished before wgmma.fence orders them for the tensor
    // cores (the compiler may not sink them past it).
    fence_operands(o);
    fence_operands(pk);
    wgmma_fence();
    constexpr int kStepKeys = kFp8 ? 32 : 16;
#pragma unroll
    for (int kk = 0; kk < T::kBc / kStepKeys; ++kk) {
      uint32_t const a[4] = {pk[4 * kk], pk[4 * kk + 1], pk[4 * kk + 2], pk[4 * kk + 3]};
      // O's first kVCols columns: the accumulator's first kVCols / 2 floats per thread.
      auto& acc = *reinterpret_cast<float(*)[kVCols / 2]>(&o[0]);
      if constexpr (kFp8) {
        uint64_t const db = kStepped ? vd + kk * 256 / 16
                                     : make_desc_none(v_base + kk * 256, 128, T::kVtGroupBytes);
        Wgmma<kMma, kVCols, Operands::kRS, 0>::run(acc, a, db, 1);
      } else {
        Wgmma<kMma, kVCols, Operands::kRS, 1>::run(acc, a, desc(vd, v_base, kk * 2048, T::kBc * 128),
                                                   1);
      }
    }
    wgmma_commit();
  };
  // O times each row's factor, in the blocks where softmax() says a row moved its maximum
  // (softmax.cuh's kStaleLog2).
  auto rescale_o = [&](float const(&rescale)[2]) {
#pragma unroll
    for (int i = 0; i < kVCols / 2; ++i) o[i] *= rescale[(i >> 1) & 1];
  };
  // P in registers: the accumulator layout of S is the A-operand layout of P V's wgmma. In e4m3
  // it is not: a thread's accumulators of a 32-key step are columns {2t, 2t + 1, 8 + 2t, 9 + 2t}
  // of its rows in each 16-key half (t = lane % 4), its A bytes k = 4t .. 4t + 3 of them. The
  // bytes are packed in that order, so A's k = 4t + i holds key 8 (i / 2) + 2t + i % 2 of the
  // half, and the producer writes V's keys into the transposed stage in the same order
  // (mainloop_load.cuh's load_transpose_v): no shuffles between threads.
  using MmaElem = std::conditional_t<kMma == DType::kBF16, __nv_bfloat16, __half>;
  auto to_p = [&](float const(&sc)[T::kBc / 2], uint32_t(&pk)[T::kPRegs]) {
    if constexpr (kFp8) {
#pragma unroll
      for (int kk = 0; kk < T::kBc / 32; ++kk) {
        float const* s = sc + 16 * kk;  // n8 tiles 4 kk .. 4 kk + 3: (r0, r0), (r0 + 8, r0 + 8)
        pk[4 * kk + 0] = ptx::e4m3x4_from(s[0], s[1], s[4], s[5]);     // row r0, keys 0-15
        pk[4 * kk + 1] = ptx::e4m3x4_from(s[2], s[3], s[6], s[7]);     // row r0 + 8
        pk[4 * kk + 2] = ptx::e4m3x4_from(s[8], s[9], s[12], s[13]);   // row r0, keys 16-31
        pk[4 * kk + 3] = ptx::e4m3x4_from(s[10], s[11], s[14], s[15]); // row r0 + 8
      }
    } else {
#pragma unroll
      for (int i = 0; i < T::kBc / 4; ++i) {
        pk[i] = ptx::pack2<MmaElem>(sc[2 * i], sc[2 * i + 1]);
      }
    }
  };
  auto release = [&](uint64_t* empty, Slot<T> slot) {
    if (lane == 0) mbar_arrive(&empty[slot.stage]);  // one arrival per warp
  };
  // Q K^T of the block in `slot` has completed: its K stage is free, and after the tile's last
  // block so is Q (the producer may load the next tile's while this one finishes).
  auto qk_done = [&](Slot<T> slot, bool last) {
    release(sm.k_empty, slot);
    if (last && lane == 0) mbar_arrive(sm.q_empty);
  };

  Slot<T> cur(pipe);  // block it's position
  if constexpr (T::kOverlap) {
    // Intra-warpgroup overlap: while the tensor cores run block it's P V and block it + 1's
    // Q K^T, this warpgroup's threads run block it + 1's softmax.
    if (n_blocks > 0) {
      float sc[T::kBc / 2];
      uint32_t pk[T::kPRegs];
      float rescale[2];
      turns.take();
      issue_qk(cur, sc);
      turns.pass();
      wgmma_wait<0>();
      fence_operands(sc);
      qk_done(cur, n_blocks == 1);
      softmax(0, sc, rescale);
      to_p(sc, pk);
      for (int it = 0; it + 1 < n_blocks; ++it) {
        Slot<T> const nxt = cur.next();
        turns.take();
        issue_qk(nxt, sc);
        issue_pv(cur, pk);
        turns.pass();
        wgmma_wait<1>();  // Q K^T of block it + 1 is done; P V of block it may still run
        fence_operands(sc);
        qk_done(nxt, it + 2 == n_blocks);
        // The wait for block it's P V sits in both arms of a branch on the softmax's outcome:
        // after the softmax in one basic block, ptxas hoisted it to the block's top, above the
        // row maximum and every exponential, so the softmax never ran under this warpgroup's
        // P V (SASS of every overlapped sm90 kernel; in the branch, the FA-paper grid ran
        // 1.02x, d 256 up to 1.05x, H200, with a warp vote as the condition). The condition is
        // ORed over the warpgroup instead (the wait is .aligned: synccheck failed the warp
        // vote) and O is rescaled only where a row moved its maximum (softmax.cuh). That the
        // exponentials stay above the wait is ptxas's choice: tools/check_sass.py checks it.
        //
        // The softmax runs in two calls (kMax, then after the wait kExp), which kernel.cuh's
        // kSplitSoftmax makes a split in the FP8 d 256 tiles' plain instantiation: there the
        // wait comes after the row maxima, and the exponentials run after it, in one basic
        // block with P's packing; elsewhere kMax runs the whole step and kExp nothing. A key
        // timeline of the FP8 d 128 tile (8k keys, H200, docs/performance.md session 65) had
        // each warpgroup's block at about 2900 cycles, 1960-2020 of them softmax and 290-330
        // packing P after the wait for P V, which then took 23-28 cycles.
        bool const moved = softmax(it + 1, sc, rescale, SoftmaxPart::kMax);
        if (warpgroup_any(turns.wg, moved)) {
          wgmma_wait<0>();  // P V of block it is done: its P registers and V stage are free
          fence_operands(o);
          rescale_o(rescale);
        } else {
          wgmma_wait<0>();
          fence_operands(o);
        }
        release(sm.v_empty, cur);
        softmax(it + 1, sc, rescale, SoftmaxPart::kExp);
        to_p(sc, pk);
        cur = nxt;
      }
      turns.take();
      issue_pv(cur, pk);
      turns.pass();
      wgmma_wait<0>();
      fence_operands(o);
      release(sm.v_empty, cur);
    }
  } else {
    for (int it = 0; it < n_blocks; ++it, cur = cur.next()) {
      float sc[T::kBc / 2];
      uint32_t pk[T::kPRegs];
      float rescale[2];
      turns.take();
      issue_qk(cur, sc);
      turns.pass();
      wgmma_wait<0>();
      fence_operands(sc);
      qk_done(cur, it + 1 == n_blocks);
      if (softmax(it, sc, rescale)) rescale_o(rescale);
      to_p(sc, pk);
      turns.take();
      issue_pv(cur, pk);
      turns.pass();
      wgmma_wait<0>();
      fence_operands(o);
      release(sm.v_empty, cur);
    }
  }
}

}  // namespace fa::cuda::sm90
