// The sm90 family's epilogue: normalises a consumer thread's two rows of O and writes them (a row
// with no visible key gets 0) and their natural-log LSE, or, for one split of the keys, the fp32
// partials the combine kernel merges (which adds the sinks once). A warpgroup whose 64 rows all
// lie in the sequence writes O through shared memory and one TMA store per 64 columns.
#pragma once

#include <cstdint>

#include "cuda/forward_params.hpp"
#include "cuda/ptx.cuh"
#include "cuda/sm90/narrow.hpp"
#include "cuda/sm90/ptx_sm90.cuh"
#include "cuda/sm90/softmax.cuh"
#include "cuda/sm90/tile.cuh"
#include "cuda/sm90/tile_scheduler.cuh"

namespace fa::cuda::sm90 {

// Stages a warpgroup's 64 normalised rows in its slab of the O buffer (the layout of a
// SWIZZLE_128B box of 64 rows x 64 columns per column block: 16-byte unit u of row r at
// unit u ^ (r % 8)), or with Tile::kOInQ in its own rows of the Q tile (the same boxes, kBr rows
// apart), and has its first thread store them with TMA. A V head read `shift` columns to the
// left (narrow.hpp's column_shift: 8, one 16-byte unit) has its units staged one to the left,
// the first (the zeros left of column 0) in the last, whose columns lie past head_dim_v (the
// shift fits the pair), where the store clips them: a TMA store at a negative column stopped the
// kernel with an illegal instruction (H200), where loads there read zeros. The thread also
// waits, before the slab is written, until its previous tile's stores have read it (long done:
// a tile's main loop runs between).
template <class T, class Elem>
__device__ __forceinline__ void store_o_tma(Params const& params, Smem<T> const& sm, Work const& w,
                                            float const (&o)[T::kDv / 2], float const (&inv)[2],
                                            int wg, int64_t wg_row, int shift) {
  int const wtid = threadIdx.x % 128, warp = wtid / 32, lane = wtid % 32;
  if (wtid == 0) tma_store_wait_read();
  warpgroup_sync(wg);
  // Column block cb's 64 rows start at slab + cb * cb_bytes.
  uint8_t* const slab =
      T::kOInQ ? sm.q_tile + wg * 64 * 128 : sm.o_tile + wg * (T::kDv / 64) * 64 * 128;
  constexpr int cb_bytes = T::kOInQ ? T::kBr * 128 : 64 * 128;
  // stmatrix.x4: matrices (rows +0, columns 8j), (+8, 8j), (+0, 8j + 8), (+8, 8j + 8); lane t
  // addresses row t % 8 of matrix t / 8.
  int const m = lane / 8, row = 16 * warp + 8 * (m & 1) + lane % 8;
  uint32_t const row_base = smem_addr(slab) + row * 128;
  constexpr int kUnits = T::kDv / 8;
#pragma unroll
  for (int j = 0; j < kUnits; j += 2) {
    int unit = j + (m >> 1) - shift / 8;  // this lane's 8-column unit
    if (unit < 0) unit += kUnits;
    uint32_t const addr = row_base + (unit / 8) * cb_bytes + (((unit % 8) ^ (row % 8)) * 16);
    stmatrix_x4(addr, ptx::pack2<Elem>(o[4 * j] * inv[0], o[4 * j + 1] * inv[0]),
                ptx::pack2<Elem>(o[4 * j + 2] * inv[1], o[4 * j + 3] * inv[1]),
                ptx::pack2<Elem>(o[4 * j + 4] * inv[0], o[4 * j + 5] * inv[0]),
                ptx::pack2<Elem>(o[4 * j + 6] * inv[1], o[4 * j + 7] * inv[1]));
  }
  fence_proxy_async_shared();  // the slab's writes, before TMA reads it
  warpgroup_sync(wg);
  if (wtid == 0) {
#pragma unroll
    for (int cb = 0; cb < T::kDv / 64; ++cb) {
      tma_store_4d(&params.o_map, slab + cb * cb_bytes, cb * 64, int(w.seq.q_first + wg_row),
                   w.head, w.map_batch);
    }
    tma_store_commit();
  }
}

// row0: the thread's first row in its sequence; wg_row: its warpgroup's first; c: the exponent's
// scale for each of its two rows (softmax's). A sink joins the denominator:
//   l' = l e^(m - M) + e^(sink - M) with M = max(m, sink).
// Both rows' sums are reduced before any store is issued (a shuffle queued behind the first
// row's 16 stores waited for them: 9% of the stall samples at d 128, causal 512, on an H200).
// Elem: O's type (the tile's, or an FP8 tile's bf16 or fp16). An FP8 tile's sums carry its P's
// factor 2^7 (softmax.cuh's kSumScale), which o_mul takes out of O with V's descale (1 in a
// 16-bit tile with a 16-bit cache): O's rows times o_mul / sum. kShift (a narrow pair):
// O's columns start at its V head's column shift (Params::v_shift; never with split outputs,
// which run the general instantiation).
template <class T, bool kGeneral, bool kBounded = kGeneral, class Elem = typename T::Elem,
          bool kShift = false>
__device__ __forceinline__ void store_tile(Params const& params, Smem<T> const& sm, Work const& w,
                                           OnlineSoftmax<T> const& softmax,
                                           float const (&o)[T::kDv / 2], float const (&c)[2],
                                           float o_mul, int64_t row0, int64_t wg_row, int wg,
                                           int lane) {
  ForwardParams const& p = params.p;
  Elem* o_ptr = static_cast<Elem*>(p.o);
  bool const split_out = kGeneral && p.num_splits > 1;
  float inv[2], lse[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = detail::quad_sum(softmax.row_sum[r]) * OnlineSoftmax<T>::kSumScale;
    // natural log
    // sum is 0 (no visible key), positive, or NaN (a NaN score: fmaxf kept it out of the
    // maximum, the exponentials carried it), which inv and the LSE then carry.
    float top = sum == 0.f ? -INFINITY : softmax.row_max[r] * c[r] * 0.69314718055994531f;
    float out_scale = 1.f;
    if (kGeneral && p.sinks != nullptr && !split_out) {
      float const sink = p.sinks[w.head];
      float const m = top;
      top = fmaxf(m, sink);
      out_scale = m == -INFINITY ? 0.f : __expf(m - top);
      sum = sum * out_scale + (sink == -INFINITY ? 0.f : __expf(sink - top));  // -inf: no sink
    }
    inv[r] = sum == 0.f ? 0.f : o_mul * (out_scale / sum);
    lse[r] = sum == 0.f ? -INFINITY : top + logf(sum);
  }
  // An FP8 d 256 tile's general instantiation (score transforms, split outputs, sinks) stores O
  // by the threads: staged, it spilled 116-144 bytes (ptxas), where the plain one does not.
  constexpr bool kStaged = T::kOStaged && !(kGeneral && T::kFp8 && T::kD == 256);
  // The warpgroup's rows all in the sequence (uniform over its 128 threads, as the barriers in
  // store_o_tma need).
  bool const by_tma = kStaged && !split_out && params.o_tma != 0 && wg_row + 64 <= w.seq.sq;
  int const shift =
      kShift ? column_shift(params.v_shift, int(params.kv_group_div.div(uint32_t(w.head)))) : 0;
  // The bounded instantiations' 8-column chunks that the threads store (bit j: registers
  // o[4j..4j+3]; narrow.hpp's stored_chunks). One mask a tile and a predicated store a chunk:
  // the same bounds as a compare and a branch out of the loop per chunk ran d 64 on its (64, 64)
  // pair at 1.05x plain d 64's time at 512 keys (the same key loop; 1.05-1.06x the warp
  // instructions, 1.3x the branches, its stores 1.27-1.35x the L2 write sectors), and the masks
  // ran d 24-56 1.007-1.012x faster (512 keys up to 1.05x; H200, docs/performance.md session 75).
  uint32_t chunks = ~0u;
  if constexpr (kBounded) chunks = stored_chunks(shift, int(p.head_dim_v));
  if constexpr (kStaged) {
    if (by_tma) store_o_tma<T, Elem>(params, sm, w, o, inv, wg, wg_row, shift);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    int64_t const row = row0 + 8 * r;
    if (row >= w.seq.sq) continue;
    if (split_out) {
      // [num_splits, rows, heads_q, d] and [num_splits, heads_q, rows] (forward_params.hpp).
      int64_t const out_row =
          (p.layout == kLayoutVarlen ? w.seq.q_first : int64_t(w.batch) * p.seqlen_q) + row;
      int64_t const slot = int64_t(w.split) * p.partial_rows + out_row;
      // Rows of head_dim_v floats (the combine reads them so): columns j * 8 + 0..7 are this
      // quad's, and a head dim below the kernel's ends at a multiple of 8.
      float* dst = p.o_partial + (slot * p.heads_q + w.head) * int64_t(p.head_dim_v) + 2 * (lane % 4);
#pragma unroll
      for (int j = 0; j < T::kDv / 8; ++j) {
        if (8 * j >= p.head_dim_v) break;
        *reinterpret_cast<float2*>(dst + 8 * j) =
            make_float2(o[4 * j + 2 * r] * inv[r], o[4 * j + 2 * r + 1] * inv[r]);
      }
      if (lane % 4 == 0) {
        p.lse_partial[(int64_t(w.split) * p.heads_q + w.head) * p.partial_rows + out_row] = lse[r];
      }
      continue;
    }
    if (!by_tma) {
      Elem* out = o_ptr + w.batch * p.o_batch_stride + (w.seq.q_first + row) * p.o_seq_stride +
                  w.head * p.o_head_stride;
      // A shifted head's columns are its registers' from the second 8 on (the first, the zeros
      // left of its column 0, are not stored).
#pragma unroll
      for (int j = 0; j < T::kDv / 8; ++j) {
        // Nothing past the caller's last column. Only the bounded instantiations (general,
        // narrow pairs: kernel.cuh) run a head dim below the kernel's: a compare per chunk in
        // the plain one cost d 256 28-36 bytes more spills and 1.4%, d 64 causal 512-1024 2-5%
        // (H200).
        if (kBounded && ((chunks >> j) & 1u) == 0) continue;
        uint32_t const v =
            ptx::pack2<Elem>(o[4 * j + 2 * r] * inv[r], o[4 * j + 2 * r + 1] * inv[r]);
        *reinterpret_cast<uint32_t*>(out + (8 * j - shift) + 2 * (lane % 4)) = v;
      }
    }
    if (p.lse != nullptr && lane % 4 == 0) {
      int64_t const at = p.layout == kLayoutVarlen
                             ? int64_t(w.head) * p.total_q + w.seq.q_first + row
                             : (int64_t(w.batch) * p.heads_q + w.head) * p.seqlen_q + row;
      p.lse[at] = lse[r];
    }
  }
}

// At the kernel's end: the warpgroup's TMA stores have read their shared memory before the
// block exits (it must outlive their reads). Their global writes need not have landed: the
// grid's completion makes them visible, to the next kernel and to the host alike. Waiting for
// the writes too (cp.async.bulk.wait_group 0, then an L1 invalidate) held 1.2% of the warp
// samples of a one-tile-per-block d 256 kernel (causal 4k), yet not waiting ran the FA-paper
// grid 1.0001x (H200): the wait is the one the block needs, not a speed-up.
template <class T>
__device__ __forceinline__ void finish_stores() {
  if constexpr (T::kOStaged) {
    if (threadIdx.x % 128 == 0) tma_store_wait_read();
  }
}

}  // namespace fa::cuda::sm90
