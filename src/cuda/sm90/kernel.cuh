// The Hopper (sm_90a) forward kernel: a producer warp streams Q, K and V tiles by TMA into
// 128-byte-swizzled shared memory through a multi-stage mbarrier pipeline (mainloop_load.cuh);
// consumer warpgroups, 64 query rows each, compute S = Q K^T with wgmma from shared memory, run
// the online softmax in fp32 on the accumulator layout (softmax.cuh), and accumulate O += P V
// with P kept in registers (mainloop_mma.cuh), then write O (by TMA from shared memory where it
// fits) and the LSE (epilogue.cuh). Blocks take tiles from the scheduler (tile_scheduler.cuh);
// launch.cuh registers and launches it.
#pragma once

#include <cstdint>

#include "cuda/forward_params.hpp"
#include "cuda/sm90/epilogue.cuh"
#include "cuda/sm90/mainloop_load.cuh"
#include "cuda/sm90/mainloop_mma.cuh"
#include "cuda/sm90/narrow.hpp"
#include "cuda/sm90/ptx_sm90.cuh"
#include "cuda/sm90/softmax.cuh"
#include "cuda/sm90/tile.cuh"
#include "cuda/sm90/tile_scheduler.cuh"

namespace fa::cuda::sm90 {

// kGeneral adds the score transforms (soft-capping, ALiBi, a negative scale: ForwardParams::
// transform), attention sinks, split outputs and the column bounds of head dims below the
// kernel's; the plain instantiation has none. kQkCols and kVCols: 0, the kernel's own dims, or
// (plain only) a narrow pair's, with the column bounds and the heads' column shifts
// (narrow.hpp's column_shift: rows 16 bytes into a 32-byte sector read from 8 columns to the
// left), V's map over a row's heads (flat_v_map) and on d 64's pairs Q's and K's boxes of
// exactly head_dim columns (exact_qk_boxes). kE4M3 (rules::fp8_kv_tile configs, the kernel's
// own head dims; the plain instantiation on Tile::kE4M3Keys tiles only): an e4m3 K/V
// cache. The producer warpgroup converts its V to fp16 in shared memory (mainloop_load.cuh's
// load_convert_e4m3) and P V runs in fp16. Its K: with bf16 queries at d 128 and 256
// (Tile::kE4M3Keys) read as loaded, S = Q K^T on wgmma's e4m3 form against each query row held
// as two e4m3 rows times a power of two (mainloop_mma.cuh's q_bf16_to_e4m3_pair); otherwise
// converted to fp16 as V is, bf16 queries rewritten as fp16 rows times powers of two
// (q_bf16_to_fp16). k_descale and those powers are folded into the scores' scale, v_descale
// into O.
// An FP8 tile (T::kFp8: e4m3 Q, K and V) runs e4m3 products in both instantiations (its
// descales are read in either: sm90/family.cpp's schedule): the producer transposes V
// (mainloop_load.cuh's load_transpose_v) or, on a dense or varlen problem given the workspace,
// copies the images of its stages that v_images.cuh wrote before the run (load_fp8_images; a
// tile of T::kImagesOnly does nothing else, on 24 registers: config.hpp's e4m3_images_only), P
// is rounded to e4m3 (mainloop_mma.cuh), q_descale * k_descale is folded into the scores' scale
// as an e4m3 cache's k_descale is, and v_descale into O, written in bf16 or fp16
// (ForwardParams::o_bf16), staged for TMA where it fits.
template <class T, bool kGeneral, int kQkCols = 0, int kVCols = 0, bool kE4M3 = false>
__global__ void __launch_bounds__(T::kThreads, 1) forward_kernel(__grid_constant__ Params const params) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(!kE4M3 || kQkCols == 0, "e4m3 caches: the kernel's own head dims");
  static_assert(kQkCols == 0 || (!kGeneral && kQkCols % 16 == 0 && kQkCols <= T::kD &&
                                 kVCols % 8 == 0 && kVCols > 0 && kVCols <= T::kDv),
                "a narrow pair, in the plain instantiation");
  // Loads and stores bounded at the problem's head dims (below the kernel's).
  constexpr bool kBounded = kGeneral || kQkCols != 0;
  constexpr DType kMma = kE4M3 ? DType::kFP16 : T::kType;  // the products' element type
  // An e4m3 cache's K read as loaded, S = Q K^T in e4m3: the plain e4m3 instantiation (which
  // exists for Tile::kE4M3Keys tiles only); P V still in kMma. (In the general one, which keeps
  // both tensors converted, the query rows' e4m3 pairs spilled 68 bytes at d 128.)
  constexpr bool kKeys8 = kE4M3 && !kGeneral;
  static_assert(!kKeys8 || T::kE4M3Keys, "e4m3 keys read as loaded: bf16 queries, d 128 or 256");
  // A programmatic dependent of the stream's previous kernel (launch.cpp): nothing is read
  // before it has finished; the next kernel may be placed from here on and waits likewise.
  ptx::wait_for_prior_grids();
  ptx::allow_dependent_grids();
  ForwardParams const& p = params.p;
  extern __shared__ uint8_t smem_raw[];
  Smem<T> const sm(smem_raw, kE4M3);
  TileScheduler<T> const sched(p);
  int const tid = threadIdx.x;
  // Arrivals that fill a V stage besides TMA's bytes: the 128 converting, gathering or
  // transposing producer threads', or the one thread's that copies an FP8 tile's V image.
  bool const v_by_threads =
      kE4M3 || params.kv_gather || (T::kFp8 && !T::kImagesOnly && params.p.v_images == nullptr);
  if (tid == 0) sm.init_barriers(v_by_threads ? 128 : 1, kE4M3, kKeys8);
  if constexpr (kQkCols != 0 && T::kD == 64) {
    // A narrow pair's boxes of exactly head_dim columns (Params::qk_box_cols) leave the Q
    // buffer's and K stages' columns past it unwritten: zeros from here on, which S = Q K^T
    // reads up to the pair's columns. The async proxy (TMA, wgmma) sees them after the fence.
    if (params.qk_box_cols != 0) {
      uint4* const zero = reinterpret_cast<uint4*>(sm.q_tile);
      for (int i = tid; i < (T::kQBytes + T::kStages * T::kKVBytes) / 16; i += T::kThreads) {
        zero[i] = make_uint4(0u, 0u, 0u, 0u);
      }
      fence_proxy_async_shared();
    }
  }
  __syncthreads();
  // The producer converts an e4m3 cache as well as loading: at 24 registers ptxas spilled
  // 120-184 bytes in the conversion, at 40 36 bytes at d 128 with four passes' loads in flight;
  // at 56 none with eight (mainloop_load.cuh), the consumers' S, P (fp16) and O within 224 less
  // 24 (d 128: 160, and 16 for the hi query rows with kKeys8; d 256 with 64 keys: 176). So the
  // e4m3 instantiations split 56 / 224 whatever the tile's own split (40 / 232, or 24 / 240 at
  // d 256): on an H200 0.997-1.04x 40 / 232's e4m3 / bf16 cache ratio at d 64-256
  // (docs/performance.md, session 61).
  static_assert(!kE4M3 || T::kConsumers == 2, "e4m3: two consumer warpgroups");
  constexpr int kProducerRegs = kE4M3 ? 56 : T::kProducerRegs;
  constexpr int kConsumerRegs = kE4M3 ? 224 : T::kConsumerRegs;
  static_assert(128 * (kProducerRegs + T::kConsumers * kConsumerRegs) <=
                    T::kThreads * (65536 / T::kThreads / 8 * 8 < 256 ? 65536 / T::kThreads / 8 * 8
                                                                      : 256),
                "producer and consumer registers fit the block's launch allocation (tile.cuh)");
  static_assert(!kE4M3 || T::kBc / 2 + T::kBc / 4 + T::kDv / 2 +
                                   (kKeys8 && T::kD == 128 ? 16 : 0) <=
                               kConsumerRegs - 24,
                "e4m3: S, P, O (and kKeys8's hi query rows at d 128) in the consumers' registers");

  if (tid < 128) {
    // Producer warpgroup: one warp issues the TMA copies (all four a paged cache's boxes), the
    // whole warpgroup gathers a paged cache's rows, or converts an e4m3 cache's
    // (mainloop_load.cuh).
    regs_dealloc<kProducerRegs>();
    if constexpr (T::kImagesOnly) {
      // (Its launches always bring the images: the plan falls back to another tile without.)
      if (tid < 32) load_fp8_images<T>(params, sm, sched, tid == 0);
    } else if constexpr (T::kFp8) {
      if (params.p.v_images == nullptr) {
        load_transpose_v<T>(params, sm, sched, tid);
      } else if (tid < 32) {
        load_fp8_images<T>(params, sm, sched, tid == 0);
      }
    } else if constexpr (kE4M3) {
      load_convert_e4m3<T, kKeys8>(params, sm, sched, tid);
    } else {
      load_tiles<T, kBounded, kQkCols != 0>(params, sm, sched, tid);
    }
    return;
  }

  regs_alloc<kConsumerRegs>();
  // The consumer warpgroup; where the descriptors are stepped (mainloop_mma.cuh's
  // kStepDescriptors: d <= 128, 16-bit d 192 and 256) through a shuffle, so the compiler knows
  // it is warp-uniform and builds the Q tile's stepped wgmma descriptors in uniform registers (no
  // per-block 64-bit adds and moves on the vector pipe). With the softmax overlap
  // (mainloop_mma.cuh, its condition then a warp vote) the FA-paper grid ran d 128 1.00-1.12x
  // and d 64 0.99-1.07x the previous commit, the overlap alone 1.00-1.04x and 0.98-1.04x
  // (H200). At d 256 with descriptors rebuilt per step its uniform registers ran out and it
  // spilled more (0.95-1.02x).
  // The FP8 tiles' plain instantiation takes the warpgroup through the shuffle too: held in a
  // vector register, its wg (the named barrier of the key loop's warpgroup vote) spilled at d 256
  // with 128 keys, a store and a load every key block (24 / 48 bytes before); its general
  // instantiation spilled more with the shuffle (20 -> 40 bytes) and keeps the division.
  int const wg = (kStepDescriptors<T, kMma> || (T::kFp8 && !kGeneral)
                      ? __shfl_sync(0xffffffffu, tid / 128, 0)
                      : tid / 128) -
                 1;
  int const warp = (tid / 32) % 4, lane = tid % 32;
  int const r0 = 16 * warp + lane / 4;  // this thread's rows in the warpgroup: r0 and r0 + 8
  uint32_t const q_base = smem_addr(sm.q_tile) + wg * 64 * 128;
  float const c = p.score_scale_log2;
  bool const transform = kGeneral && p.transform;
  Turns<T> const turns{wg};
  turns.start();

  int64_t pipe = 0, q_round = 0;
  for (int64_t round = 0;; ++round) {
    int64_t const tile = sched.tile(round);
    if (tile >= sched.n_tiles) break;
    // (The plain e4m3 consumers decode by divisions too: with the fast decode ptxas spilled 32
    // bytes at d 128 and chunked prefill ran 0.99x, H200.)
    Work const w = work_of<T, !kGeneral && !kE4M3>(params, tile);
    int const sq = w.seq.sq, sk = w.seq.sk;
    int64_t const row0 = int64_t(w.m_block) * T::kBr + wg * 64 + r0;
    RowFrame frame{row0 + sk - sq, int64_t(w.m_block) * T::kBr + wg * 64 + sk - sq, sk, lane, 0.f};
    if (transform && p.alibi != 0) {
      frame.slope = p.alibi_slopes[(p.alibi == 2 ? int64_t(w.batch) * p.heads_q : 0) + w.head] *
                    1.4426950408889634f;
    }

    float o[T::kDv / 2];
#pragma unroll
    for (int i = 0; i < T::kDv / 2; ++i) o[i] = 0.f;
    OnlineSoftmax<T> softmax;
    if (w.n_blocks > 0) {
      mbar_wait(sm.q_full, q_round & 1);
      ++q_round;
    }
    // The exponent's scale per row (r0, r0 + 8). The descales of an e4m3 cache or of an FP8
    // tile's e4m3 Q, K and V (one per tensor, or per (sequence, K/V head)): the scores are
    // q_descale k_descale (q . k) (q_descale in an FP8 tile only), times 2^k for bf16 query rows
    // an e4m3 cache's instantiation holds as q 2^-k in fp16 (or as two e4m3 rows, kKeys8),
    // folded into the exponent's scale (and so into the LSE) or, with score transforms (whose
    // scale is applied to the raw score) or a descale product that is not positive (the running
    // maximum assumes a positive scale), applied to each score.
    float tile_c[2] = {c, c}, score_mul[2] = {1.f, 1.f}, v_descale = 1.f;
    bool scale_scores = false;
    if constexpr (kE4M3 || T::kFp8) {
      int64_t const at = p.descale_per_head
                             ? int64_t(w.batch) * (p.heads_q / p.q_heads_per_kv) +
                                   w.head / p.q_heads_per_kv
                             : 0;
      float const q_descale = T::kFp8 && p.q_descale != nullptr ? p.q_descale[at] : 1.f;
      float const k_descale = p.k_descale != nullptr ? p.k_descale[at] : 1.f;
      if (p.v_descale != nullptr) v_descale = p.v_descale[at];
      float const mul = q_descale * k_descale;
      float q_scale[2] = {1.f, 1.f};
      if constexpr (kKeys8) {
        if (w.n_blocks > 0) q_bf16_to_e4m3_pair<T>(sm.q_tile, wg, r0, lane, q_scale);
      } else if constexpr (kE4M3 && T::kType == DType::kBF16) {
        if (w.n_blocks > 0) q_bf16_to_fp16<T>(sm.q_tile, wg, r0, lane, q_scale);
      }
      scale_scores = transform || !(mul > 0.f);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        score_mul[r] = mul * q_scale[r];
        if (!scale_scores) tile_c[r] = c * score_mul[r];
      }
    }

    // A block's softmax step, or its maxima (kMax, with its mask and transforms) and then its
    // exponentials (kExp) in two calls, which the overlapped loop makes with its wait for the
    // previous block's P V between them (mainloop_mma.cuh). Split in the FP8 d 256 tiles' plain
    // instantiation only; elsewhere kMax runs the whole step and kExp nothing. H200, FA-paper
    // grid, every FP8 tile split against none: d 256 1.018x (1.002-1.036), d 128 0.993x
    // (0.974-0.987 on the 192-key tile from 2k keys); split, the general d 256 instantiation
    // spilled 296 bytes where unsplit it spilled 132 then, so it is not (docs/performance.md,
    // session 65).
    constexpr bool kSplitSoftmax = T::kFp8 && T::kD == 256 && !kGeneral;
    auto const step = [&](int it, float(&sc)[T::kBc / 2], float(&rescale)[2],
                          SoftmaxPart part = SoftmaxPart::kAll) -> bool {
      if (part == SoftmaxPart::kExp) {
        if constexpr (kSplitSoftmax) softmax.exp_part(tile_c, sc, rescale);
        return false;
      }
      int64_t const key0 = int64_t(w.n_begin + w.n_blocks - 1 - it) * T::kBc;
      if constexpr (kE4M3 || T::kFp8) {
        if (scale_scores) {
#pragma unroll
          for (int i = 0; i < T::kBc / 2; ++i) sc[i] *= score_mul[(i >> 1) & 1];
        }
      }
      return kSplitSoftmax && part == SoftmaxPart::kMax
                 ? softmax.step_max(p, frame, transform, tile_c, key0, sc, rescale)
                 : softmax.step(p, frame, transform, tile_c, key0, sc, rescale);
    };
    if constexpr (kQkCols != 0) {
      consume_tile<T, kQkCols / 16, kVCols, kMma>(sm, q_base, pipe, w.n_blocks, lane, turns, o,
                                                  step);
    } else {
      consume_tile<T, T::kQkSteps, T::kDv, kMma, kKeys8>(sm, q_base, pipe, w.n_blocks, lane,
                                                         turns, o, step);
    }
    pipe += w.n_blocks;
    // O's factor: v_descale, and an FP8 tile's P carried 2^7 (softmax.cuh's kSumScale takes it
    // out), folded into the epilogue's two normalising factors: as its own pass over O, 64
    // FMULs a thread at d 128, it took 16% of the FP8 tile's instructions after the key loop.
    float const o_mul = kE4M3 || T::kFp8 ? v_descale * OnlineSoftmax<T>::kSumScale : 1.f;
    int64_t const wg_row = int64_t(w.m_block) * T::kBr + wg * 64;
    if constexpr (T::kFp8) {
      if (p.o_bf16) {
        store_tile<T, kGeneral, kBounded, __nv_bfloat16>(params, sm, w, softmax, o, tile_c,
                                                         o_mul, row0, wg_row, wg, lane);
      } else {
        store_tile<T, kGeneral, kBounded, __half>(params, sm, w, softmax, o, tile_c, o_mul, row0,
                                                  wg_row, wg, lane);
      }
    } else {
      store_tile<T, kGeneral, kBounded, typename T::Elem, kQkCols != 0>(
          params, sm, w, softmax, o, tile_c, o_mul, row0, wg_row, wg, lane);
    }
  }
  turns.finish();
  finish_stores<T>();
#endif
}

}  // namespace fa::cuda::sm90
