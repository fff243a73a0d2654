// The FA2 forward kernel (mma.sync m16n8k16, ldmatrix, cp.async; sm_80 and newer), templated on a
// KernelConfig whose every field selects a code path.
//
// One thread block computes B_r query rows of one (batch, head). Each of its n_warps warps owns
// B_r / n_warps rows and walks all key/value blocks of B_c rows:
//
//   S = Q K^T (fp32)  ->  online softmax (fp32, exp2)  ->  P (16-bit)  ->  O += P V (fp32)
//
// Shared memory holds one Q, one K and one V tile (single-buffered, the seed's layout); O is staged in
// Q's region for 16-byte global stores. Every tile is stored as d_head/64 column slabs of rows x 64
// elements (128-byte rows); with `swizzled` the 16-byte chunk index of each row is XORed with row % 8,
// which makes both the 16-byte cp.async writes and the 8-row ldmatrix reads bank-conflict free (a plain
// 128-byte row stride puts all 8 rows of an ldmatrix phase in the same 4 banks: 8-way conflicts).
#pragma once

#include <cuda_runtime.h>

#include "cuda/forward_params.hpp"
#include "cuda/ptx.cuh"
#include "cuda/sequence_view.cuh"
#include "cuda/sm80/epilogue.cuh"
#include "cuda/sm80/gemm.cuh"
#include "cuda/sm80/mask.cuh"
#include "cuda/sm80/smem_tile.cuh"
#include "cuda/sm80/softmax.cuh"
#include "cuda/sm80/traits.cuh"

namespace fa::cuda::sm80 {
// kGeneral selects the code of every feature; without it the kernel takes dense, varlen and
// contiguous-cache layouts with causal and window masks only, and its key loop has no register to
// spare: the features' state alone cost
// 250-500 bytes of spills per thread at (128, 128, 64) when both shared one instantiation.
// kE4M3Kv (a general instantiation, fp8_kv_tile configs only) reads an e4m3 K/V cache: each
// tile's bytes are staged in shared memory and converted to fp16 by the threads that copied them
// (smem_tile.cuh), the MMAs run in fp16 (bf16 queries rewritten as fp16 rows times a power of
// two, q_for_mma), the scores scaled by k_descale (and each row's power of two) and O by
// v_descale.
// kKeySplit (a general instantiation of the decode tiles with a 16-bit cache, where the tile's
// rows fit one warp's 16: ForwardParams::key_split) gives each warp a quarter of every key
// block's keys over all the tile's rows instead of a quarter of the rows over all keys, and
// merges the warps' partial results through shared memory at the end. A decode tile holds a
// few packed rows (4 with 32/8 heads), so otherwise one warp of four computes and three wait on
// the barriers: ncu on a 1 x 8k step (H200, d 128) found one warp per scheduler issuing 0.11
// instructions a cycle, stalled on barriers, instruction fetch and fixed latencies more than on
// memory (1.6 TB/s).
// With both (kDirect: an e4m3 cache on those tiles), each warp also streams its own keys
// through two stages of e4m3 bytes that it alone copies and waits for (no block barrier in the
// key loop), and ldmatrix reads the bytes straight into fragments (smem_tile.cuh's
// E4M3LdsmAddress: Q's columns permuted for K, O's for V).
template <KernelConfig C, bool kGeneral, bool kE4M3Kv, bool kKeySplit = false>
__device__ __forceinline__ void forward_block(ForwardParams const& p) {
  using Tr = Traits<C>;
  using T = typename Tr::T;
  // K and V elements as stored.
  using KvElem = std::conditional_t<kE4M3Kv, uint8_t, T>;
  // The MMAs' type: fp16 against an e4m3 cache whatever the queries' type. Decoding e4m3 into
  // bf16 took five instructions per pair against fp16's one cvt (sm_89+): with bf16 queries the
  // conversions were 42 M of the step's 88 M warp instructions (ncu, H200, 8 x 32k, d 128).
  using M = std::conditional_t<kE4M3Kv, __half, T>;
  constexpr bool kQToFp16 = kE4M3Kv && !std::is_same_v<T, __half>;
  constexpr int kMT = Tr::kMTiles;
  static_assert(!kE4M3Kv || (kGeneral && rules::fp8_kv_tile(C)), "e4m3 caches: general, 64-row tiles");
  // Warps sharing a key block, and each warp's n8 key tiles and k16 key steps of it.
  constexpr int kKS = kKeySplit ? C.n_warps : 1;
  constexpr int kKT = Tr::kKeyTiles / kKS;
  constexpr int kKSteps = Tr::kKeySteps / kKS;
  constexpr int kPVGroup = Tr::kPVGroup < kKSteps ? Tr::kPVGroup : kKSteps;
  static_assert(!kKeySplit || (kGeneral && rules::key_split_tile(C) && kMT == 1 &&
                               kKT % 2 == 0 && kKSteps >= 1 && kKSteps % kPVGroup == 0),
                "key split: the decode tiles, one m16 tile per warp");
  constexpr bool kDirect = kE4M3Kv && kKeySplit;
  constexpr int kWarpKeys = C.B_c / kKS;
  // A warp's keys are what one ldmatrix.x4 reads per k16 step of K (32) or two (16).
  static_assert(!kDirect || kWarpKeys == 16 || kWarpKeys == 32, "e4m3 key split: 16 or 32 keys");
  // kDirect: two stages, each an e4m3 K tile then an e4m3 V tile, after Q.
  constexpr uint32_t kTileBytes = uint32_t(C.B_c) * C.d_head;

  // Launched as a programmatic dependent of the stream's previous kernel (sm_90: launch.cpp):
  // nothing is read before that kernel has finished and its writes are visible. The stream's
  // next kernel (the split's combine, or the next forward) may then be placed while this grid
  // runs; it waits likewise.
  ptx::wait_for_prior_grids();
  ptx::allow_dependent_grids();
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);  // (B_r, d_head), later O
  T* sK = sQ + C.B_r * C.d_head;           // (B_c, d_head)
  T* sV = sK + C.B_c * C.d_head;           // (B_c, d_head)
  // e4m3 staging of K and V after V (e4m3_smem_bytes).
  uint32_t const stage_k = ptx::smem_addr(sV + C.B_c * C.d_head);
  uint32_t const stage_v = stage_k + C.B_c * 128 * ((C.d_head + 127) / 128);
  // Each query row's power of two with bf16 queries on an e4m3 cache (q_for_mma), after
  // the staging (e4m3_smem_bytes; kDirect: e4m3_split_smem_bytes).
  float* const row_scale = reinterpret_cast<float*>(
      smem_raw + (kDirect ? C.B_r * C.d_head * sizeof(T) + 4 * kTileBytes
                          : (C.B_r + 2 * C.B_c) * C.d_head * sizeof(T) +
                                2 * C.B_c * 128 * ((C.d_head + 127) / 128)));

  int const tid = threadIdx.x;
  int const warp = tid / 32;
  int const lane = tid % 32;
  // The warp's first key of a block (the key split's share; 0 without it).
  int const warp_key0 = kKeySplit ? warp * kWarpKeys : 0;

  // Blocks of one (batch, head) are adjacent, so blocks running together share K/V in L2; within it
  // the last query block runs first, as under causal masking it has the most keys to visit.
  int const q_block = p.n_q_blocks - 1 - static_cast<int>(blockIdx.x % p.n_q_blocks);
  int64_t rest = blockIdx.x / p.n_q_blocks;
  int const unit = static_cast<int>(rest % p.head_units);
  rest /= p.head_units;
  // Both instantiations take dense, varlen and contiguous-cache layouts (they differ only in
  // where a sequence starts and how long it is); a paged cache needs the general one.
  int const layout = p.layout;
  int const num_splits = kGeneral ? p.num_splits : 1;
  bool const pack = kGeneral && p.pack_gqa;
  bool const transform = kGeneral && p.transform;
  // Head dims below the kernel's run in the general instantiation only (needs_general): the
  // plain one's loads take no column bound.
  int const head_dim = kGeneral ? p.head_dim : C.d_head;
  int const head_dim_v = kGeneral ? p.head_dim_v : C.d_head;
  int const split = static_cast<int>(rest % num_splits);
  int64_t const batch = rest / num_splits;
  int const group = pack ? p.q_heads_per_kv : 1;
  int const kv_head = pack ? unit : unit / p.q_heads_per_kv;

  SequenceView const seq = sequence_view(p, layout, batch);
  int const q_row0 = q_block * C.B_r;  // in packed rows: (query, head in group) pairs
  int const q_rows = min(C.B_r, seq.sq * group - q_row0);
  if (q_rows <= 0) return;  // a varlen sequence shorter than the longest (uniform per block)
  // Packed row r is query r / group of head kv_head * group + r % group.
  auto query_of = [&](int r) { return (q_row0 + r) / group; };
  auto head_of = [&](int r) { return pack ? kv_head * group + (q_row0 + r) % group : unit; };

  T const* const q_base = static_cast<T const*>(p.q) + batch * p.q_batch_stride +
                          seq.q_first * p.q_seq_stride;
  auto q_row_ptr = [&](auto, int r) {
    return q_base + int64_t(query_of(r)) * p.q_seq_stride + int64_t(head_of(r)) * p.q_head_stride;
  };
  // K and V rows: a fixed stride, or for a paged cache the row's page from the block table
  // (the page index clamped into [0, num_pages)).
  bool const paged = kGeneral && layout == kLayoutPagedKv;
  KvElem const* const k_base = static_cast<KvElem const*>(p.k) + int64_t(kv_head) * p.k_head_stride +
                               (paged ? 0 : batch * p.k_batch_stride + seq.k_first * p.k_seq_stride);
  KvElem const* const v_base = static_cast<KvElem const*>(p.v) + int64_t(kv_head) * p.v_head_stride +
                               (paged ? 0 : batch * p.v_batch_stride + seq.k_first * p.v_seq_stride);
  int32_t const* const pages = p.block_table + batch * p.max_pages_per_seq;
  // A paged block's rows: this thread's page and row in it for each copy pass. They are looked
  // up once per block for both K and V, and one block ahead (right after V's copies of the block
  // before are issued), so the block-table loads land while that block computes instead of
  // delaying the copies that need them. Measured at 8 x 8k, page 16, against the contiguous
  // cache's 3582 GB/s: lookups per row for K and V each 2580 GB/s; once per block 3069 GB/s.
  // The page index is kept as loaded and clamped into [0, num_pages) where a copy uses it: the
  // clamp next to the load made the warp wait for the block table right there (ncu, H200,
  // e4m3 8 x 32k, page 16: long-scoreboard stalls 0.62 per issued instruction, contiguous 0.04).
  // kDirect: a warp's lanes copy rows warp_key0 + lane / 4 + 8 i (load_warp_rows_e4m3).
  constexpr int kKvPasses = kDirect ? kWarpKeys / 8 : C.B_c / Tr::kCopyRows;
  int page_of[kGeneral ? kKvPasses : 1];
  int row_in_page[kGeneral ? kKvPasses : 1];
  auto look_up_pages = [&](int block) {
    unrolled_for<kKvPasses>([&](int i) {
      int const key = block * C.B_c + i * (kDirect ? 8 : Tr::kCopyRows) +
                      (kDirect ? warp_key0 + lane / 4 : tid / 8);
      int const safe = min(key, max(seq.sk - 1, 0));  // rows past the end are never copied
      page_of[i] = pages[safe / p.page_size];
      row_in_page[i] = safe % p.page_size;
    });
  };
  auto kv_row_ptr = [&](KvElem const* base, int64_t batch_stride, int64_t seq_stride, int i, int key) {
    if constexpr (kGeneral) {
      if (paged) {
        int const page = min(max(page_of[i], 0), p.num_pages - 1);
        return base + int64_t(page) * batch_stride + int64_t(row_in_page[i]) * seq_stride;
      }
    }
    return base + int64_t(key) * seq_stride;
  };

  // Key blocks to visit: those holding a key visible to some row of the tile. The bounds move
  // right with the query, so the first row's lower and the last row's upper bound delimit them;
  // blocks outside are skipped, not computed. A split takes an equal share of them.
  KeyBounds const first_bounds = key_bounds(p, seq, query_of(0));
  KeyBounds const last_bounds = key_bounds(p, seq, query_of(q_rows - 1));
  int block_begin = first_bounds.lo / C.B_c;
  int block_end = last_bounds.hi < first_bounds.lo ? block_begin : last_bounds.hi / C.B_c + 1;
  if (num_splits > 1) {
    int const per_split = (block_end - block_begin + num_splits - 1) / num_splits;
    block_begin = min(block_end, block_begin + split * per_split);
    block_end = min(block_end, block_begin + per_split);
  }
  // A block needs masking when it runs past the sequence's keys, or when some key in it is
  // invisible to some row: below the last row's lower bound or above the first row's upper one.
  auto needs_mask = [&](int block) {
    int const start = block * C.B_c;
    int const end = start + C.B_c;
    return end > seq.sk || (p.masked && (start < last_bounds.lo || end - 1 > first_bounds.hi));
  };
  auto kv_rows = [&](int block) { return seq.sk - block * C.B_c; };
  auto load_k = [&](int block) {
    int const key0 = block * C.B_c;
    auto const row_ptr = [&](int i, int r) { return kv_row_ptr(k_base, p.k_batch_stride, p.k_seq_stride, i, key0 + r); };
    if constexpr (kE4M3Kv) {
      load_block_e4m3<C, C.B_c>(stage_k, row_ptr, static_cast<uint8_t const*>(p.k), tid, kv_rows(block), head_dim);
    } else {
      load_block<C, C.B_c>(sK, row_ptr, static_cast<T const*>(p.k), tid, kv_rows(block), head_dim);
    }
    commit_loads<C>();
  };
  auto load_v = [&](int block) {
    int const key0 = block * C.B_c;
    auto const row_ptr = [&](int i, int r) { return kv_row_ptr(v_base, p.v_batch_stride, p.v_seq_stride, i, key0 + r); };
    if constexpr (kE4M3Kv) {
      load_block_e4m3<C, C.B_c>(stage_v, row_ptr, static_cast<uint8_t const*>(p.v), tid, kv_rows(block), head_dim_v);
    } else {
      load_block<C, C.B_c>(sV, row_ptr, static_cast<T const*>(p.v), tid, kv_rows(block), head_dim_v);
    }
    commit_loads<C>();
    if (paged && block + 1 < block_end) look_up_pages(block + 1);
  };
  // kDirect: this warp's rows of K[block] and V[block] into stage `stage` (its own commit).
  uint32_t const stages = ptx::smem_addr(sK);
  auto load_kv_warp = [&](int block, int stage) {
    if constexpr (kDirect) {
      int const key0 = block * C.B_c;
      uint32_t const k_tile = stages + uint32_t(stage) * 2 * kTileBytes;
      auto const k_row = [&](int i, int r) {
        return kv_row_ptr(k_base, p.k_batch_stride, p.k_seq_stride, i, key0 + r);
      };
      auto const v_row = [&](int i, int r) {
        return kv_row_ptr(v_base, p.v_batch_stride, p.v_seq_stride, i, key0 + r);
      };
      load_warp_rows_e4m3<C, C.B_c, kWarpKeys>(k_tile, k_row, static_cast<uint8_t const*>(p.k),
                                               warp_key0, lane, kv_rows(block), head_dim);
      load_warp_rows_e4m3<C, C.B_c, kWarpKeys>(k_tile + kTileBytes, v_row,
                                               static_cast<uint8_t const*>(p.v), warp_key0, lane,
                                               kv_rows(block), head_dim_v);
    }
  };

  // Per-lane ldmatrix coordinates (see the fragment layouts of mma.m16n8k16):
  //   Q (A operand): lanes 0-15 address rows 0-15 at column 0, lanes 16-31 the same rows at column 8.
  //   K (B operand of Q K^T, K is n x k row-major = "col" B): lanes give key rows lane % 8 (+8 for
  //     lanes 16-31) at column (lane & 8), so one x4 yields b0/b1 of two adjacent n8 key tiles.
  //   V (B operand of P V, transposed): lanes give key rows lane % 16 at column (lane / 16) * 8.
  // The warp's first tile row (every warp's is row 0 with the key split) and first key of a
  // block, and that key's byte offset in the K and V tiles (64-column slabs of 128-byte rows;
  // a multiple of 8 rows keeps the swizzle).
  int const warp_row0 = kKeySplit ? 0 : warp * Tr::kRowsPerWarp;
  uint32_t const kv_off = uint32_t(warp_key0) * 64 * sizeof(T);
  int const q_ld_row = warp_row0 + lane % 16;
  int const q_ld_col = (lane / 16) * 8;
  int const k_ld_row = lane % 8 + 8 * (lane / 16);
  int const k_ld_col = lane & 8;
  int const v_ld_row = lane % 16;
  int const v_ld_col = (lane / 16) * 8;
  // Accumulator coordinates: lane (g, t) holds rows g and g + 8 of each m16 tile and columns
  // 2t, 2t + 1 of each n8 tile.
  int const g = lane / 4;
  int const t = lane % 4;
  // Without the key split, a warp whose rows all lie past the tile's last row (a prefill
  // tile's tail, a decode tile of 17-48 packed rows) skips its MMAs and softmax; it still
  // copies tiles and meets every barrier.
  bool const warp_active = !kGeneral || kKeySplit || warp * Tr::kRowsPerWarp < q_rows;

  int const n_visit = block_end - block_begin;
  if (paged && n_visit > 0) look_up_pages(block_begin);
  // An e4m3 cache's descales: one per tensor, or per (sequence, K/V head) (the tile's rows share
  // one K/V head, packed or not); none given reads 1.
  float k_descale = 1.f, v_descale = 1.f;
  if constexpr (kE4M3Kv) {
    int64_t const at = p.descale_per_head ? batch * (p.heads_q / p.q_heads_per_kv) + kv_head : 0;
    if (p.k_descale != nullptr) k_descale = p.k_descale[at];
    if (p.v_descale != nullptr) v_descale = p.v_descale[at];
  }
  load_block<C, C.B_r>(sQ, q_row_ptr, static_cast<T const*>(p.q), tid, q_rows, head_dim);
  commit_loads<C>();
  if constexpr (kDirect) {
    if (n_visit > 0) load_kv_warp(block_begin, 0);
    commit_loads<C>();
    if (paged && n_visit > 1) look_up_pages(block_begin + 1);
    wait_loads<C, 1>();  // Q landed; this warp's K[0] and V[0] may still be in flight
    __syncthreads();
    q_for_mma<C, kQToFp16, true>(sQ, row_scale, tid);
    __syncthreads();
  } else if constexpr (kE4M3Kv) {
    if (n_visit > 0) {
      load_k(block_begin);
      load_v(block_begin);
    }
  } else if constexpr (C.eager_load_blocks) {
    if (n_visit > 0) load_k(block_begin);
  }
  if constexpr (kQToFp16 && !kDirect) {
    if (n_visit > 0) {
      wait_loads<C, 2>();  // Q landed; K[0] and V[0] may still be in flight
    } else {
      wait_loads<C, 0>();
    }
    __syncthreads();
    q_for_mma<C, true, false>(sQ, row_scale, tid);
    __syncthreads();
  }

  uint32_t q_frag[Tr::kDSteps][kMT][4];
  LdsmAddress<C.B_r, C.swizzled> const q_addr(ptx::smem_addr(sQ), q_ld_row, q_ld_col);
  auto load_q = [&](int kt) {
    unrolled_for<kMT>([&](int mt) {
      ptx::ldmatrix_x4(q_frag[kt][mt], q_addr.at(mt * 16, kt * 16));
    });
  };
  LdsmAddress<C.B_c, C.swizzled> const k_addr(ptx::smem_addr(sK), k_ld_row, k_ld_col);
  LdsmAddress<C.B_c, C.swizzled> const v_addr(ptx::smem_addr(sV), v_ld_row, v_ld_col);
  // kDirect's lanes in stage 0's e4m3 tiles: an ldmatrix.x4 takes 32 keys of one k16 step of K
  // (lane l: key l) or 16 keys of two steps (lane l: key l % 16, chunk + l / 16), and V's
  // 16 keys of two 16-column groups (the latter way).
  constexpr int kKeyRowsPerLd = 8 * (kKT < 4 ? kKT : 4);
  E4M3LdsmAddress<C.B_c> const ek_addr(stages, warp_key0 + lane % kKeyRowsPerLd,
                                       lane / kKeyRowsPerLd);
  E4M3LdsmAddress<C.B_c> const ev_addr(stages + kTileBytes, warp_key0 + lane % 16, lane / 16);
  if constexpr (kDirect) {
    unrolled_for<Tr::kDSteps>(load_q);  // resident: a decode tile's one m16 tile per warp
  } else if constexpr (Tr::kQResident) {
    if (kE4M3Kv && n_visit > 0) {
      wait_loads<C, 2>();  // Q landed; K[0] and V[0] may still be in flight
    } else if (C.eager_load_blocks && n_visit > 0) {
      wait_loads<C, 1>();  // Q landed; K[0] may still be in flight
    } else {
      wait_loads<C, 0>();
    }
    __syncthreads();
    unrolled_for<Tr::kDSteps>(load_q);
  }

  // Accumulator row (mt, h) of this lane within the tile; rows past the tile's end act as the
  // last one (their results are never stored).
  auto tile_row = [&](int mt, int h) {
    return min(warp_row0 + mt * 16 + g + 8 * h, q_rows - 1);
  };
  // The factor of each accumulator row's scores: k_descale, times the row's power of two where
  // its bf16 queries were scaled into fp16.
  float score_mul[kMT][2];
  unrolled_for<kMT>([&](int mt) {
    unrolled_for<2>([&](int h) {
      score_mul[mt][h] = k_descale;
      if constexpr (kQToFp16) score_mul[mt][h] *= row_scale[tile_row(mt, h)];
    });
  });

  float o_acc[kMT][Tr::kDTiles][4] = {};
  float row_max[kMT][2];
  float row_sum[kMT][2] = {};
  unrolled_for<kMT>([&](int mt) {
    row_max[mt][0] = -INFINITY;
    row_max[mt][1] = -INFINITY;
  });

  auto process_block = [&](int block, auto is_first) {
    constexpr bool kFirst = decltype(is_first)::value;
    // kDirect: this block's stage, and the next block's copies into the other one (this warp
    // finished reading it at the end of the block before).
    [[maybe_unused]] uint32_t const stage_off =
        uint32_t((block - block_begin) & 1) * 2 * kTileBytes;
    if constexpr (kDirect) {
      if (block + 1 < block_end) load_kv_warp(block + 1, ((block - block_begin) & 1) ^ 1);
      commit_loads<C>();
      if (paged && block + 2 < block_end) look_up_pages(block + 2);
      wait_loads<C, 1>();  // this warp's K[block] and V[block] landed
      __syncwarp();        // and every lane's are visible to the warp
    } else if constexpr (kE4M3Kv) {
      // An e4m3 cache's staging is a second buffer: each stage is refilled with the next
      // block's bytes as soon as its tile is converted, so K[block + 1] and V[block + 1] load
      // during this whole block (issued K, V, K, V, ...: V[block] may still be in flight here).
      // Converted in line, the 16-bit path's order (V issued after K's wait, K[block + 1] after
      // Q K^T) put each conversion between a wait and the next copy: 1.33-1.47x the bf16
      // cache's step time on the H200 (d 128, 32/8 heads, batch 1-64 x 8k-128k).
      wait_loads<C, 1>();
      convert_tile_e4m3<C, C.B_c, M>(sK, stage_k, tid);
      // K[block] visible to all warps; every warp is past its P V on the previous V tile.
      __syncthreads();
      if (block + 1 < block_end) load_k(block + 1);
    } else {
      if constexpr (!C.eager_load_blocks) load_k(block);
      // K[block] visible to all warps; every warp is past its P V on the previous V tile.
      wait_loads<C, 0>();
      __syncthreads();
      if constexpr (C.eager_load_blocks) load_v(block);  // V[block] streams in under Q K^T
    }

    // S = Q K^T                                                             // (rows/warp, B_c)
    float s[kMT][kKT][4] = {};
    // The header's scores q . k * k_descale, before any scale, softcap or mask.
    auto const apply_k_descale = [&] {
      unrolled_for<kMT>([&](int mt) {
        unrolled_for<kKT>([&](int n) {
          unrolled_for<4>([&](int e) { s[mt][n][e] *= score_mul[mt][e / 2]; });
        });
      });
    };
    if constexpr (kDirect) {
      // Each ldmatrix.x4 register holds 4 e4m3 values of one key (columns 4t..4t+3 of a k16
      // step: q_for_mma ordered Q to match), decoded into the B fragment's two pairs.
      constexpr int kStepsPerLd = kKeyRowsPerLd == 32 ? 1 : 2;
      static_assert(Tr::kDSteps % kStepsPerLd == 0 && 32 / kKeyRowsPerLd == kStepsPerLd, "x4");
      unrolled_for<Tr::kDSteps / kStepsPerLd>([&](int ld) {
        int const step0 = ld * kStepsPerLd;
        uint32_t r[4];
        ptx::ldmatrix_x4(r, ek_addr.at(0, step0) + stage_off);
        unrolled_for<4>([&](int m) {
          uint2 const b = ptx::e4m3x4_to<__half>(r[m]);
          uint32_t const frag[2] = {b.x, b.y};
          ptx::mma_m16n8k16<M>(s[0][m % kKT], q_frag[step0 + m / kKT][0], frag);
        });
      });
      apply_k_descale();
    } else if (warp_active) {
      uint32_t k_frag[Tr::kDSteps][kKT][2];
      pipelined_gemm<Tr::kDSteps, Tr::kQKGroup, C.mma_double_buffer_loads>(
          [&](int kt) {
            if constexpr (!Tr::kQResident) load_q(kt);
            unrolled_for<kKT / 2>([&](int np) {
              uint32_t r[4];
              ptx::ldmatrix_x4(r, k_addr.at(np * 16, kt * 16) + kv_off);
              k_frag[kt][2 * np][0] = r[0];
              k_frag[kt][2 * np][1] = r[1];
              k_frag[kt][2 * np + 1][0] = r[2];
              k_frag[kt][2 * np + 1][1] = r[3];
            });
          },
          [&](int kt) {
            unrolled_for<kKT>([&](int n) {
              unrolled_for<kMT>([&](int mt) {
                ptx::mma_m16n8k16<M>(s[mt][n], q_frag[kt][mt], k_frag[kt][n]);
              });
            });
          });
      if constexpr (kE4M3Kv) apply_k_descale();
    }

    if constexpr (kDirect) {
      // Nothing to wait for: V[block] landed with K[block], in this warp's one wait.
    } else if constexpr (kE4M3Kv) {
      // V[block] landed (K[block + 1], when issued, may still be in flight); every warp is
      // done reading K[block] once past the barrier.
      if (block + 1 < block_end) {
        wait_loads<C, 1>();
      } else {
        wait_loads<C, 0>();
      }
      convert_tile_e4m3<C, C.B_c, M>(sV, stage_v, tid);
      __syncthreads();
      if (block + 1 < block_end) load_v(block + 1);
    } else if constexpr (C.eager_load_blocks && kGeneral) {
      // K[block + 1] is issued as soon as every warp is done reading K[block], before waiting
      // for V[block], so two tiles are in flight at once. Decode blocks compute little and so
      // wait mostly on memory: with one tile in flight at a time, a split decode block moved
      // one tile per memory round trip.
      __syncthreads();
      if (block + 1 < block_end) {
        load_k(block + 1);
        wait_loads<C, 1>();  // V[block] landed; K[block + 1] may still be in flight
      } else {
        wait_loads<C, 0>();
      }
      __syncthreads();
    } else {
      if constexpr (!C.eager_load_blocks) load_v(block);
      // V[block] visible; every warp is done reading K[block].
      wait_loads<C, 0>();
      __syncthreads();
      if constexpr (C.eager_load_blocks) {  // K[block + 1] streams in under softmax and P V
        if (block + 1 < block_end) load_k(block + 1);
      }
    }
    if (!warp_active) return;

    // Scores: rewritten as log2 e * (bias(softcap(scale * s))) when the problem asks for it;
    // invisible keys (past the sequence, outside the row's causal/window bounds) score -inf.
    bool const masked = needs_mask(block);
    if (transform || masked) {
      // Recomputed per block rather than kept in registers across the key loop, which would
      // cost 8 of them per row pair (the loop is register-bound).
      transform_and_mask<C, kKT>(
          p, seq, block * C.B_c + warp_key0, t, transform, masked, s,
          [&](int mt, int h) { return query_of(tile_row(mt, h)); },
          [&](int mt, int h) {
            return p.alibi_slopes[(p.alibi == 2 ? batch * p.heads_q : 0) + head_of(tile_row(mt, h))] *
                   1.4426950408889634f;  // log2 units, like the scores
          });
    }

    online_softmax<C, kFirst, kKT>(p, s, row_max, row_sum, o_acc);

    // P as A fragments: accumulator tiles 2j and 2j+1 of an m16 row tile are exactly the A operand
    // of k16 step j.
    uint32_t p_frag[kKSteps][kMT][4];
    unrolled_for<kKSteps>([&](int j) {
      unrolled_for<kMT>([&](int mt) {
        p_frag[j][mt][0] = ptx::pack2<M>(s[mt][2 * j][0], s[mt][2 * j][1]);
        p_frag[j][mt][1] = ptx::pack2<M>(s[mt][2 * j][2], s[mt][2 * j][3]);
        p_frag[j][mt][2] = ptx::pack2<M>(s[mt][2 * j + 1][0], s[mt][2 * j + 1][1]);
        p_frag[j][mt][3] = ptx::pack2<M>(s[mt][2 * j + 1][2], s[mt][2 * j + 1][3]);
      });
    });

    // O += P V                                                          // (rows/warp, d_head)
    if constexpr (kDirect) {
      // An ldmatrix.x4.trans register of e4m3 bytes holds keys 2t and 2t + 1 at columns 2g and
      // 2g + 1 of a 16-column group: byte-permuted, the B fragments of the group's even columns
      // (n8 tile 2c) and odd ones (2c + 1); store_tile<kPairedD> writes them back in order.
      unrolled_for<kKSteps>([&](int j) {
        unrolled_for<Tr::kDSteps / 2>([&](int cp) {
          uint32_t r[4];
          ptx::ldmatrix_x4_trans(r, ev_addr.at(16 * j, 2 * cp) + stage_off);
          unrolled_for<2>([&](int h) {
            int const c = 2 * cp + h;
            uint2 const lo = ptx::e4m3x4_to<__half>(__byte_perm(r[2 * h], 0u, 0x3120));
            uint2 const hi = ptx::e4m3x4_to<__half>(__byte_perm(r[2 * h + 1], 0u, 0x3120));
            uint32_t const even[2] = {lo.x, hi.x};
            uint32_t const odd[2] = {lo.y, hi.y};
            ptx::mma_m16n8k16<M>(o_acc[0][2 * c], p_frag[j][0], even);
            ptx::mma_m16n8k16<M>(o_acc[0][2 * c + 1], p_frag[j][0], odd);
          });
        });
      });
      __syncwarp();  // every lane is done reading this stage before the next block refills it
      return;
    }
    uint32_t v_frag[kKSteps][Tr::kDTiles][2];
    pipelined_gemm<kKSteps, kPVGroup, C.mma_double_buffer_loads>(
        [&](int kt) {
          unrolled_for<Tr::kDTiles / 2>([&](int dp) {
            uint32_t r[4];
            ptx::ldmatrix_x4_trans(r, v_addr.at(kt * 16, dp * 16) + kv_off);
            v_frag[kt][2 * dp][0] = r[0];
            v_frag[kt][2 * dp][1] = r[1];
            v_frag[kt][2 * dp + 1][0] = r[2];
            v_frag[kt][2 * dp + 1][1] = r[3];
          });
        },
        [&](int kt) {
          unrolled_for<Tr::kDTiles>([&](int dn) {
            unrolled_for<kMT>([&](int mt) {
              ptx::mma_m16n8k16<M>(o_acc[mt][dn], p_frag[kt][mt], v_frag[kt][dn]);
            });
          });
        });
  };

  if constexpr (C.optimized_softmax) {
    // The first block sets the running max and sum outright instead of rescaling zeros.
    if (n_visit > 0) process_block(block_begin, std::true_type{});
    for (int block = block_begin + 1; block < block_end; ++block) process_block(block, std::false_type{});
  } else {
    for (int block = block_begin; block < block_end; ++block) process_block(block, std::false_type{});
  }
  if (n_visit == 0) {
    // A block that visits no key block (above the causal diagonal, outside the window, an empty
    // split) has not waited for its Q copy yet; it must land before O overwrites Q's region.
    wait_loads<C, 0>();
    __syncthreads();
  }

  if constexpr (kE4M3Kv) {
    // O = v_descale * (P V); the LSE does not depend on V.
    unrolled_for<kMT>([&](int mt) {
      unrolled_for<Tr::kDTiles>([&](int dn) {
        unrolled_for<4>([&](int e) { o_acc[mt][dn][e] *= v_descale; });
      });
    });
  }
  if constexpr (kKeySplit) {
    // The warps' partial results (each row's max and per-lane sums, and O, over the warp's
    // keys: the same lane layout in every warp) merged into warp 0's, through K's and V's
    // tiles: every warp is past its last P V, and no copy is in flight (the last block waited
    // for all). Warp w > 0 writes slot k of lane l at [w - 1][k][l], one bank per lane.
    constexpr int kSlots = 4 + Tr::kDTiles * 4;
    static_assert((kKS - 1) * kSlots * 32 * 4 <= 2 * C.B_c * C.d_head * sizeof(T), "room");
    float* const slots = reinterpret_cast<float*>(sK);
    __syncthreads();
    if (warp > 0) {
      float* const mine = slots + (warp - 1) * kSlots * 32 + lane;
      unrolled_for<2>([&](int h) {
        mine[h * 32] = row_max[0][h];
        mine[(2 + h) * 32] = row_sum[0][h];
      });
      unrolled_for<Tr::kDTiles>([&](int dn) {
        unrolled_for<4>([&](int e) { mine[(4 + dn * 4 + e) * 32] = o_acc[0][dn][e]; });
      });
    }
    __syncthreads();
    if (warp == 0) {
      for (int w = 1; w < kKS; ++w) {
        float const* const theirs = slots + (w - 1) * kSlots * 32 + lane;
        unrolled_for<2>([&](int h) {
          float const m0 = row_max[0][h], m1 = theirs[h * 32];
          float const top = fmaxf(m0, m1);
          // A side that saw no visible key (max -inf) has sum 0 and O 0: weight 0.
          float const c = p.score_scale_log2;
          float const f0 = m0 == -INFINITY ? 0.f : ptx::exp2_approx(m0 * c - top * c);
          float const f1 = m1 == -INFINITY ? 0.f : ptx::exp2_approx(m1 * c - top * c);
          row_max[0][h] = top;
          row_sum[0][h] = row_sum[0][h] * f0 + theirs[(2 + h) * 32] * f1;
          unrolled_for<Tr::kDTiles>([&](int dn) {
            unrolled_for<2>([&](int e) {
              int const slot = 2 * h + e;
              o_acc[0][dn][slot] = o_acc[0][dn][slot] * f0 + theirs[(4 + dn * 4 + slot) * 32] * f1;
            });
          });
        });
      }
    }
  }
  store_tile<C, kGeneral, kDirect>(p, TileRows{seq, batch, split, num_splits, layout, q_rows},
                                   query_of, head_of, row_max, row_sum, o_acc, sQ);
}

template <class Tag, bool kGeneral, bool kE4M3Kv = false, bool kKeySplit = false>
__global__ void __launch_bounds__(Traits<Tag::kConfig>::kThreads)
    forward_kernel(__grid_constant__ ForwardParams const p) {
  forward_block<Tag::kConfig, kGeneral, kE4M3Kv, kKeySplit>(p);
}

}  // namespace fa::cuda::sm80
