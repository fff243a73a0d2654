// The mma.sync family's epilogue: normalises a tile's O (sinks joining the denominator) and
// writes it with its LSE, through shared memory for 16-byte stores, or, for one split of the
// keys, writes the fp32 partials the combine kernel merges.
#pragma once

#include <cstdint>

#include "cuda/forward_params.hpp"
#include "cuda/ptx.cuh"
#include "cuda/sequence_view.cuh"
#include "cuda/sm80/smem_tile.cuh"
#include "cuda/sm80/traits.cuh"

namespace fa::cuda::sm80 {

// Where a tile's rows belong.
struct TileRows {
  SequenceView seq;
  int64_t batch;
  int split;       // this block's share of the keys, of num_splits
  int num_splits;
  int layout;
  int q_rows;      // the tile's rows that exist (packed rows with GQA packing)
};

// query_of(r) and head_of(r): the query and head of tile row r. sQ: Q's shared tile, free now,
// which stages O. With kPairedD (the e4m3 key split's P V, kernel.cuh), n8 tiles 2c and 2c + 1
// hold the even and odd columns of 16-column group c, so a lane holds columns 16c + 4t .. 4t + 3:
// (2c, e), (2c + 1, e), (2c, e + 1), (2c + 1, e + 1) for e = 0 (row g) and 2 (row g + 8).
template <KernelConfig C, bool kGeneral, bool kPairedD = false, class QueryOf, class HeadOf>
__device__ __forceinline__ void store_tile(
    ForwardParams const& p, TileRows const& rows, QueryOf const& query_of, HeadOf const& head_of,
    float (&row_max)[Traits<C>::kMTiles][2], float (&row_sum)[Traits<C>::kMTiles][2],
    float (&o_acc)[Traits<C>::kMTiles][Traits<C>::kDTiles][4], typename Traits<C>::T* sQ) {
  using Tr = Traits<C>;
  using T = typename Tr::T;
  constexpr int kMT = Tr::kMTiles;
  int const tid = threadIdx.x;
  int const warp = tid / 32;
  int const lane = tid % 32;
  int const g = lane / 4;
  int const t = lane % 4;
  SequenceView const& seq = rows.seq;
  int64_t const batch = rows.batch;
  int const split = rows.split;
  int const num_splits = rows.num_splits;
  int const layout = rows.layout;
  int const q_rows = rows.q_rows;

  // Epilogue: finish the row sums across each quad and normalise. A row without any visible key
  // has sum 0: its output is 0 and its LSE -inf. Sinks join the denominator here, unless the
  // keys are split (the combine kernel adds them once).
  bool const split_out = num_splits > 1;
  float const* const sinks = split_out || !kGeneral ? nullptr : p.sinks;
  unrolled_for<kMT>([&](int mt) {
    unrolled_for<2>([&](int h) {
      float sum = row_sum[mt][h];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      int const row = warp * Tr::kRowsPerWarp + mt * 16 + g + 8 * h;
      // The running max in natural-log units, and the row's LSE.
      // sum is 0 (no visible key), positive, or NaN (a NaN score: fmaxf kept it out of the
      // maximum, the exponentials carried it), which inv and the LSE then carry.
      float top = sum == 0.f ? -INFINITY : row_max[mt][h] * p.lse_scale;
      float out_scale = 1.f;
      if (sinks != nullptr && row < q_rows) {
        // l' = l e^(m - M) + e^(sink - M) with M = max(m, sink), in natural-log units.
        float const sink = sinks[head_of(row)];
        float const m = top;
        top = fmaxf(m, sink);
        out_scale = m == -INFINITY ? 0.f : __expf(m - top);
        sum = sum * out_scale + (sink == -INFINITY ? 0.f : __expf(sink - top));  // -inf: no sink
      }
      float const inv = sum == 0.f ? 0.f : out_scale / sum;
      float const lse = sum == 0.f ? -INFINITY : top + logf(sum);
      unrolled_for<Tr::kDTiles>([&](int dn) {
        o_acc[mt][dn][2 * h] *= inv;
        o_acc[mt][dn][2 * h + 1] *= inv;
      });
      if (row >= q_rows) return;
      int const query = query_of(row);
      int const head = head_of(row);
      if (split_out) {
        // Partial results in fp32, straight from registers: rows of the split are
        // rows x heads_q x head_dim_v floats, each lane holding two adjacent columns per n8
        // tile (a head dim below the kernel's ends at a whole n8 tile).
        int64_t const out_row = (layout == kLayoutVarlen ? seq.q_first : batch * p.seqlen_q) + query;
        int64_t const slot = int64_t(split) * p.partial_rows + out_row;
        float* dst = p.o_partial + (slot * p.heads_q + head) * int64_t(p.head_dim_v) +
                     (kPairedD ? 4 : 2) * t;
        if constexpr (kPairedD) {
          // Four adjacent columns per 16-column group: one 16-byte store (head_dim_v, a
          // multiple of 8, keeps rows 32-byte aligned; a group the head dim cuts in half
          // stores from lanes t < 2 only).
          unrolled_for<Tr::kDTiles / 2>([&](int c) {
            if (p.head_dim_v >= C.d_head || 16 * c + 4 * t < p.head_dim_v) {
              *reinterpret_cast<float4*>(dst + 16 * c) =
                  make_float4(o_acc[mt][2 * c][2 * h], o_acc[mt][2 * c + 1][2 * h],
                              o_acc[mt][2 * c][2 * h + 1], o_acc[mt][2 * c + 1][2 * h + 1]);
            }
          });
        } else {
          auto store = [&](int dn) {
            *reinterpret_cast<float2*>(dst + dn * 8) =
                make_float2(o_acc[mt][dn][2 * h], o_acc[mt][dn][2 * h + 1]);
          };
          // The kernel's own head dim stores with no compare per n8 tile (one branch instead).
          if (p.head_dim_v >= C.d_head) {
            unrolled_for<Tr::kDTiles>(store);
          } else {
            unrolled_for<Tr::kDTiles>([&](int dn) {
              if (dn * 8 < p.head_dim_v) store(dn);
            });
          }
        }
        if (t == 0) {
          p.lse_partial[(int64_t(split) * p.heads_q + head) * p.partial_rows + out_row] = lse;
        }
        return;
      }
      if (p.lse != nullptr && t == 0) {
        int64_t const at = layout == kLayoutVarlen
                               ? int64_t(head) * p.total_q + seq.q_first + query
                               : (batch * p.heads_q + head) * p.seqlen_q + query;
        p.lse[at] = lse;
      }
    });
  });
  if (split_out) return;  // uniform: the partial outputs are written
  unrolled_for<kMT>([&](int mt) {
    unrolled_for<2>([&](int h) {
      int const row = warp * Tr::kRowsPerWarp + mt * 16 + g + 8 * h;
      if constexpr (kPairedD) {
        unrolled_for<Tr::kDTiles / 2>([&](int c) {
          int const col = 16 * c + 8 * (t / 2);
          *reinterpret_cast<uint2*>(sQ + tile_offset<C.B_r, C.swizzled>(row, col) + 4 * (t % 2)) =
              make_uint2(ptx::pack2<T>(o_acc[mt][2 * c][2 * h], o_acc[mt][2 * c + 1][2 * h]),
                         ptx::pack2<T>(o_acc[mt][2 * c][2 * h + 1],
                                       o_acc[mt][2 * c + 1][2 * h + 1]));
        });
      } else {
        unrolled_for<Tr::kDTiles>([&](int dn) {
          int const col = dn * 8;
          *reinterpret_cast<uint32_t*>(sQ + tile_offset<C.B_r, C.swizzled>(row, col) + 2 * t) =
              ptx::pack2<T>(o_acc[mt][dn][2 * h], o_acc[mt][dn][2 * h + 1]);
        });
      }
    });
  });
  __syncthreads();  // O rows are written per warp and read back by every thread
  T* const o_base = static_cast<T*>(p.o) + batch * p.o_batch_stride + seq.q_first * p.o_seq_stride;
  constexpr int kPasses = C.B_r / Tr::kCopyRows;
  int const row0 = tid / 8;
  int const col0 = (tid % 8) * 8;
  uint32_t const src = ptx::smem_addr(sQ) + 2 * tile_offset<C.B_r, C.swizzled>(row0, col0);
  unrolled_for<kPasses>([&](int i) {
    int const row_step = i * Tr::kCopyRows;
    int const r = row0 + row_step;
    if (r < q_rows) {
      T* dst = o_base + int64_t(query_of(r)) * p.o_seq_stride + int64_t(head_of(r)) * p.o_head_stride + col0;
      unrolled_for<Tr::kSlabs>([&](int sl) {
        // Nothing past the caller's last column (below the kernel's only in the general
        // instantiation: needs_general).
        if (kGeneral && sl * 64 + col0 >= p.head_dim_v) return;
        *reinterpret_cast<uint4*>(dst + sl * 64) =
            ptx::ld_shared_16(src + 2 * (sl * C.B_r * 64 + row_step * 64));
      });
    }
  });
}

}  // namespace fa::cuda::sm80
