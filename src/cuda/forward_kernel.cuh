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

#include <type_traits>
#include <utility>

#include "core/kernel_config.hpp"
#include "cuda/forward_params.hpp"
#include "cuda/kernel_entry.hpp"
#include "cuda/ptx.cuh"
#include "cuda/sequence_view.cuh"

namespace fa::cuda {

template <int kValue>
using Int = std::integral_constant<int, kValue>;

// Calls f(Int<0>{}), ..., f(Int<N-1>{}): register-array indices stay compile-time constants, so the
// fragments live in registers rather than local memory.
template <int N, class F>
__device__ __forceinline__ void static_for(F&& f) {
  [&]<int... kI>(std::integer_sequence<int, kI...>) { (f(Int<kI>{}), ...); }(
      std::make_integer_sequence<int, N>{});
}

template <KernelConfig C>
struct Traits {
  static_assert(rules::fields_in_range(C), "a field is out of [0, 65536]");
  static_assert(rules::dtype_ok(C), "dtype must be FP16 or BF16");
  static_assert(rules::d_head_ok(C), "d_head must be a multiple of 64 in [64, 256]");
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

  static constexpr int kSmemBytes = C.smem_bytes();
};

// Element offset of (row, col) in a tile of kRows rows; col is a multiple of 8 (one 16-byte chunk).
template <int kRows, bool kSwizzled>
__device__ __forceinline__ int tile_offset(int row, int col) {
  int chunk = (col % 64) / 8;
  if constexpr (kSwizzled) chunk ^= row % 8;
  return (col / 64) * (kRows * 64) + row * 64 + chunk * 8;
}

// One lane's ldmatrix addresses in a tile of kRows rows, with the swizzle resolved up front.
//
// A lane addresses row r0 + R and column c0 + C, where (r0, c0) is its own offset (c0 is 0 or 8)
// and (R, C) a compile-time step with R % 8 == 0 and C % 16 == 0. The swizzled 16-byte chunk is
// ((C % 64) / 8 + c0 / 8) ^ (r0 % 8); C only moves chunk bits 1 and 2, so the four addresses for
// (C % 64) / 16 = 0..3 are computed once, and every ldmatrix becomes base + a constant that folds
// into its immediate offset. Computing the XOR per instruction instead cost about 4 integer
// instructions per ldmatrix (the PTX of a (64, 64) kernel had 8 adds and shifts per mma).
template <int kRows, bool kSwizzled>
struct LdsmAddress {
  uint32_t base[4];

  __device__ __forceinline__ LdsmAddress(uint32_t tile, int r0, int c0) {
#pragma unroll
    for (int j = 0; j < 4; ++j) base[j] = tile + 2 * tile_offset<kRows, kSwizzled>(r0, 16 * j + c0);
  }
  template <int kRowStep, int kColStep>
  __device__ __forceinline__ uint32_t at() const {
    static_assert(kRowStep % 8 == 0 && kColStep % 16 == 0, "steps keep the lane's swizzle");
    return base[(kColStep % 64) / 16] + 2 * ((kColStep / 64) * kRows * 64 + kRowStep * 64);
  }
};

// Copies a kRows x d_head tile from global memory into shared memory; row_ptr(i, r) is the start
// of tile row r (r < kRows), the thread's row of pass i (a compile-time constant), in global memory: a fixed stride for dense tensors, a page lookup for a
// paged cache, a per-row head for packed GQA queries.
// Thread t moves the 16-byte chunk t % 8 of rows t / 8, t / 8 + kCopyRows, ... in each slab; the
// row step keeps row % 8, so the thread's swizzled chunk is the same in every pass and the shared
// address is one base plus a constant. With kBounded, rows at or past `rows` (the end of the
// sequence) are filled with zeros instead, and their address is never formed: zero K rows give
// finite scores that the mask then removes, and zero V rows meet P = 0, never 0 * NaN.
template <KernelConfig C, int kRows, bool kBounded, class RowPtr>
__device__ __forceinline__ void load_tile(typename Traits<C>::T* smem, RowPtr const& row_ptr,
                                          typename Traits<C>::T const* any_valid, int tid,
                                          int rows) {
  using Tr = Traits<C>;
  using T = typename Tr::T;
  constexpr int kPasses = kRows / Tr::kCopyRows;
  int const row0 = tid / 8;
  int const col0 = (tid % 8) * 8;
  uint32_t const dst = ptx::smem_addr(smem) + 2 * tile_offset<kRows, C.swizzled>(row0, col0);
  auto dst_at = [&](auto s, auto i) {
    return dst + 2 * (decltype(s)::value * kRows * 64 + decltype(i)::value * Tr::kCopyRows * 64);
  };
  auto in_bounds = [&](auto i) { return !kBounded || row0 + decltype(i)::value * Tr::kCopyRows < rows; };
  // Pass by pass: each row's address (a page lookup for a paged cache) is formed once and
  // serves every slab, and only one is live at a time; an array of them would hold 2 registers
  // per pass through the copy, which the key loop (register-bound at 255) cannot spare.
  auto src_of = [&](auto i) {
    return in_bounds(i) ? row_ptr(i, row0 + decltype(i)::value * Tr::kCopyRows) + col0 : any_valid;
  };
  if constexpr (C.async_copy) {
    static_for<kPasses>([&](auto i) {
      T const* const src = src_of(i);
      static_for<Tr::kSlabs>([&](auto s) {
        if constexpr (kBounded) {
          ptx::cp_async_16_zfill(dst_at(s, i), src + decltype(s)::value * 64, in_bounds(i));
        } else {
          ptx::cp_async_16(dst_at(s, i), src + decltype(s)::value * 64);
        }
      });
    });
  } else {
    // Synchronous: all loads are issued before the first store so they overlap in flight.
    uint4 staged[Tr::kSlabs][kPasses];
    static_for<kPasses>([&](auto i) {
      T const* const src = src_of(i);
      static_for<Tr::kSlabs>([&](auto s) {
        staged[s][i] = in_bounds(i) ? *reinterpret_cast<uint4 const*>(src + decltype(s)::value * 64)
                                    : make_uint4(0, 0, 0, 0);
      });
    });
    static_for<Tr::kSlabs>([&](auto s) {
      static_for<kPasses>([&](auto i) { ptx::st_shared_16(dst_at(s, i), staged[s][i]); });
    });
  }
}

// load_tile for a block that may be the partial last one of its sequence.
template <KernelConfig C, int kRows, class RowPtr>
__device__ __forceinline__ void load_block(typename Traits<C>::T* smem, RowPtr const& row_ptr,
                                           typename Traits<C>::T const* any_valid, int tid,
                                           int rows) {
  if (rows >= kRows) {
    load_tile<C, kRows, false>(smem, row_ptr, any_valid, tid, rows);
  } else {
    load_tile<C, kRows, true>(smem, row_ptr, any_valid, tid, rows);
  }
}

template <KernelConfig C>
__device__ __forceinline__ void commit_loads() {
  if constexpr (C.async_copy) ptx::cp_async_commit();
}
template <KernelConfig C, int kPending>
__device__ __forceinline__ void wait_loads() {
  if constexpr (C.async_copy) ptx::cp_async_wait<kPending>();
}

// Runs kSteps k16 steps of a warp GEMM whose operands are loaded kGroup steps at a time. With
// double buffering the loads of group g + 1 are issued before the MMAs of group g, so ldmatrix
// latency hides behind tensor-core work.
template <int kSteps, int kGroup, bool kDoubleBuffer, class Load, class Mma>
__device__ __forceinline__ void pipelined_gemm(Load&& load, Mma&& mma) {
  static_assert(kSteps % kGroup == 0);
  constexpr int kGroups = kSteps / kGroup;
  if constexpr (kDoubleBuffer) {
    static_for<kGroup>([&](auto i) { load(i); });
    static_for<kGroups>([&](auto g) {
      constexpr int kG = decltype(g)::value;
      if constexpr (kG + 1 < kGroups) {
        static_for<kGroup>([&](auto i) { load(Int<(kG + 1) * kGroup + decltype(i)::value>{}); });
      }
      static_for<kGroup>([&](auto i) { mma(Int<kG * kGroup + decltype(i)::value>{}); });
    });
  } else {
    static_for<kGroups>([&](auto g) {
      constexpr int kG = decltype(g)::value;
      static_for<kGroup>([&](auto i) { load(Int<kG * kGroup + decltype(i)::value>{}); });
      static_for<kGroup>([&](auto i) { mma(Int<kG * kGroup + decltype(i)::value>{}); });
    });
  }
}

// nvcc's host-stub generator cannot spell a class-type non-type template argument of a __global__
// function template, so the kernel is templated on this type, which carries the config.
template <KernelConfig C>
struct ConfigTag {
  static constexpr KernelConfig kConfig = C;
};

// The keys query i sees: [lo, hi], clamped to [0, sk - 1] (empty when lo > hi). int64: i + sk -
// sq -/+ a window bound can leave the int32 range.
struct KeyBounds {
  int lo;
  int hi;
};
__device__ __forceinline__ KeyBounds key_bounds(ForwardParams const& p, SequenceView const& s,
                                                int i) {
  int64_t const diag = int64_t(i) + s.sk - s.sq;
  int64_t const lo = max(diag - p.window_left, int64_t(0));
  int64_t const hi = min(diag + p.window_right, int64_t(s.sk) - 1);
  return {int(min(lo, int64_t(s.sk))), int(max(hi, int64_t(-1)))};
}

// kGeneral selects the code of every feature; without it the kernel takes dense, varlen and
// contiguous-cache layouts with causal and window masks only, and its key loop has no register to
// spare: the features' state alone cost
// 250-500 bytes of spills per thread at (128, 128, 64) when both shared one instantiation.
template <KernelConfig C, bool kGeneral>
__device__ __forceinline__ void forward_block(ForwardParams const& p) {
  using Tr = Traits<C>;
  using T = typename Tr::T;
  constexpr int kMT = Tr::kMTiles;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);  // (B_r, d_head), later O
  T* sK = sQ + C.B_r * C.d_head;           // (B_c, d_head)
  T* sV = sK + C.B_c * C.d_head;           // (B_c, d_head)

  int const tid = threadIdx.x;
  int const warp = tid / 32;
  int const lane = tid % 32;

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
  int const split = static_cast<int>(rest % num_splits);
  int64_t const batch = rest / num_splits;
  int const group = pack ? p.q_heads_per_kv : 1;
  int const kv_head = pack ? unit : unit / p.q_heads_per_kv;

  // The combine kernel of a split launch may start now: it waits for this grid on the device,
  // and starting early hides its launch latency (one wave of blocks is the split's usual grid).
  if (num_splits > 1) ptx::allow_dependent_grids();
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
  T const* const k_base = static_cast<T const*>(p.k) + int64_t(kv_head) * p.k_head_stride +
                          (paged ? 0 : batch * p.k_batch_stride + seq.k_first * p.k_seq_stride);
  T const* const v_base = static_cast<T const*>(p.v) + int64_t(kv_head) * p.v_head_stride +
                          (paged ? 0 : batch * p.v_batch_stride + seq.k_first * p.v_seq_stride);
  int32_t const* const pages = p.block_table + batch * p.max_pages_per_seq;
  // A paged block's rows: this thread's page and row in it for each copy pass. They are looked
  // up once per block for both K and V, and one block ahead (right after V's copies of the block
  // before are issued), so the block-table loads land while that block computes instead of
  // delaying the copies that need them. Measured at 8 x 8k, page 16, against the contiguous
  // cache's 3582 GB/s: lookups per row for K and V each 2580 GB/s; once per block 3069 GB/s.
  constexpr int kKvPasses = C.B_c / Tr::kCopyRows;
  int page_of[kGeneral ? kKvPasses : 1];
  int row_in_page[kGeneral ? kKvPasses : 1];
  auto look_up_pages = [&](int block) {
    static_for<kKvPasses>([&](auto i) {
      int const key = block * C.B_c + tid / 8 + decltype(i)::value * Tr::kCopyRows;
      int const safe = min(key, max(seq.sk - 1, 0));  // rows past the end are never copied
      page_of[i] = min(max(pages[safe / p.page_size], 0), p.num_pages - 1);
      row_in_page[i] = safe % p.page_size;
    });
  };
  auto kv_row_ptr = [&](T const* base, int64_t batch_stride, int64_t seq_stride, auto i, int key) {
    if constexpr (kGeneral) {
      if (paged) {
        return base + int64_t(page_of[i]) * batch_stride + int64_t(row_in_page[i]) * seq_stride;
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
    load_block<C, C.B_c>(sK, [&](auto i, int r) { return kv_row_ptr(k_base, p.k_batch_stride, p.k_seq_stride, i, key0 + r); },
                         static_cast<T const*>(p.k), tid, kv_rows(block));
    commit_loads<C>();
  };
  auto load_v = [&](int block) {
    int const key0 = block * C.B_c;
    load_block<C, C.B_c>(sV, [&](auto i, int r) { return kv_row_ptr(v_base, p.v_batch_stride, p.v_seq_stride, i, key0 + r); },
                         static_cast<T const*>(p.v), tid, kv_rows(block));
    commit_loads<C>();
    if (paged && block + 1 < block_end) look_up_pages(block + 1);
  };

  // Per-lane ldmatrix coordinates (see the fragment layouts of mma.m16n8k16):
  //   Q (A operand): lanes 0-15 address rows 0-15 at column 0, lanes 16-31 the same rows at column 8.
  //   K (B operand of Q K^T, K is n x k row-major = "col" B): lanes give key rows lane % 8 (+8 for
  //     lanes 16-31) at column (lane & 8), so one x4 yields b0/b1 of two adjacent n8 key tiles.
  //   V (B operand of P V, transposed): lanes give key rows lane % 16 at column (lane / 16) * 8.
  int const q_ld_row = warp * Tr::kRowsPerWarp + lane % 16;
  int const q_ld_col = (lane / 16) * 8;
  int const k_ld_row = lane % 8 + 8 * (lane / 16);
  int const k_ld_col = lane & 8;
  int const v_ld_row = lane % 16;
  int const v_ld_col = (lane / 16) * 8;
  // Accumulator coordinates: lane (g, t) holds rows g and g + 8 of each m16 tile and columns
  // 2t, 2t + 1 of each n8 tile.
  int const g = lane / 4;
  int const t = lane % 4;
  // A warp whose rows all lie past the tile's last row (a decode tile of 4 packed rows uses one
  // warp of four) skips its MMAs and softmax; it still copies tiles and meets every barrier.
  bool const warp_active = !kGeneral || warp * Tr::kRowsPerWarp < q_rows;

  int const n_visit = block_end - block_begin;
  if (paged && n_visit > 0) look_up_pages(block_begin);
  load_block<C, C.B_r>(sQ, q_row_ptr, static_cast<T const*>(p.q), tid, q_rows);
  commit_loads<C>();
  if constexpr (C.eager_load_blocks) {
    if (n_visit > 0) load_k(block_begin);
  }

  uint32_t q_frag[Tr::kDSteps][kMT][4];
  LdsmAddress<C.B_r, C.swizzled> const q_addr(ptx::smem_addr(sQ), q_ld_row, q_ld_col);
  auto load_q = [&](auto kt) {
    static_for<kMT>([&](auto mt) {
      ptx::ldmatrix_x4(q_frag[kt][mt],
                       q_addr.template at<decltype(mt)::value * 16, decltype(kt)::value * 16>());
    });
  };
  LdsmAddress<C.B_c, C.swizzled> const k_addr(ptx::smem_addr(sK), k_ld_row, k_ld_col);
  LdsmAddress<C.B_c, C.swizzled> const v_addr(ptx::smem_addr(sV), v_ld_row, v_ld_col);
  if constexpr (Tr::kQResident) {
    if (C.eager_load_blocks && n_visit > 0) {
      wait_loads<C, 1>();  // Q landed; K[0] may still be in flight
    } else {
      wait_loads<C, 0>();
    }
    __syncthreads();
    static_for<Tr::kDSteps>(load_q);
  }

  // Accumulator row (mt, h) of this lane within the tile; rows past the tile's end act as the
  // last one (their results are never stored).
  auto tile_row = [&](int mt, int h) {
    return min(warp * Tr::kRowsPerWarp + mt * 16 + g + 8 * h, q_rows - 1);
  };

  float o_acc[kMT][Tr::kDTiles][4] = {};
  float row_max[kMT][2];
  float row_sum[kMT][2] = {};
  static_for<kMT>([&](auto mt) {
    row_max[mt][0] = -INFINITY;
    row_max[mt][1] = -INFINITY;
  });

  auto process_block = [&](int block, auto is_first) {
    constexpr bool kFirst = decltype(is_first)::value;
    if constexpr (!C.eager_load_blocks) load_k(block);
    // K[block] visible to all warps; every warp is past its P V on the previous V tile.
    wait_loads<C, 0>();
    __syncthreads();
    if constexpr (C.eager_load_blocks) load_v(block);  // V[block] streams in under Q K^T

    // S = Q K^T                                                             // (rows/warp, B_c)
    float s[kMT][Tr::kKeyTiles][4] = {};
    if (warp_active) {
      uint32_t k_frag[Tr::kDSteps][Tr::kKeyTiles][2];
      pipelined_gemm<Tr::kDSteps, Tr::kQKGroup, C.mma_double_buffer_loads>(
          [&](auto kt) {
            if constexpr (!Tr::kQResident) load_q(kt);
            static_for<Tr::kKeyTiles / 2>([&](auto np) {
              uint32_t r[4];
              ptx::ldmatrix_x4(r, k_addr.template at<decltype(np)::value * 16, decltype(kt)::value * 16>());
              k_frag[kt][2 * np][0] = r[0];
              k_frag[kt][2 * np][1] = r[1];
              k_frag[kt][2 * np + 1][0] = r[2];
              k_frag[kt][2 * np + 1][1] = r[3];
            });
          },
          [&](auto kt) {
            static_for<Tr::kKeyTiles>([&](auto n) {
              static_for<kMT>([&](auto mt) {
                ptx::mma_m16n8k16<T>(s[mt][n], q_frag[kt][mt], k_frag[kt][n]);
              });
            });
          });
    }

    if constexpr (!C.eager_load_blocks) load_v(block);
    if constexpr (C.eager_load_blocks && kGeneral) {
      // K[block + 1] is issued as soon as every warp is done reading K[block], before waiting
      // for V[block], so two tiles are in flight at once. Decode blocks compute little (one warp
      // of four has rows) and so wait mostly on memory: with one tile in flight at a time, a
      // split decode block moved one tile per memory round trip.
      __syncthreads();
      if (block + 1 < block_end) {
        load_k(block + 1);
        wait_loads<C, 1>();  // V[block] landed; K[block + 1] may still be in flight
      } else {
        wait_loads<C, 0>();
      }
      __syncthreads();
    } else {
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
      static_for<kMT>([&](auto mt) {
        static_for<2>([&](auto h) {
          constexpr int kH = decltype(h)::value;
          // Recomputed per block rather than kept in registers across the key loop, which
          // would cost 8 of them per row pair (the loop is register-bound).
          int const r = tile_row(decltype(mt)::value, kH);
          KeyBounds const b = key_bounds(p, seq, query_of(r));
          int64_t const diag = int64_t(query_of(r)) + seq.sk - seq.sq;
          float slope = 0.f;
          if (transform && p.alibi != 0) {
            slope = p.alibi_slopes[(p.alibi == 2 ? batch * p.heads_q : 0) + head_of(r)] *
                    1.4426950408889634f;  // log2 units, like the scores
          }
          static_for<Tr::kKeyTiles>([&](auto n) {
            static_for<2>([&](auto e) {
              int const key = block * C.B_c + decltype(n)::value * 8 + 2 * t + decltype(e)::value;
              float& x = s[mt][n][2 * kH + decltype(e)::value];
              if (transform) {
                float y = x * p.softmax_scale;
                if (p.softcap > 0.f) y = p.softcap * tanhf(y * p.inv_softcap);
                y *= 1.4426950408889634f;
                if (p.alibi != 0) y -= slope * fabsf(float(diag - key));
                x = y;
              }
              if (masked && (key < b.lo || key > b.hi)) x = -INFINITY;
            });
          });
        });
      });
    }

    // Online softmax. The 4 lanes of a quad together hold a whole row.
    static_for<kMT>([&](auto mt) {
      static_for<2>([&](auto h) {
        constexpr int kH = decltype(h)::value;
        float block_max = -INFINITY;
        static_for<Tr::kKeyTiles>([&](auto n) {
          block_max = fmaxf(block_max, fmaxf(s[mt][n][2 * kH], s[mt][n][2 * kH + 1]));
        });
        block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 1));
        block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 2));
        float const new_max = kFirst ? block_max : fmaxf(row_max[mt][kH], block_max);
        // A row that has seen no visible key yet keeps max -inf: exponentiate against 0 instead,
        // so its (all -inf) scores give 0 rather than exp2(-inf + inf) = NaN.
        float const max_scaled = new_max == -INFINITY ? 0.f : new_max * p.score_scale_log2;
        if constexpr (!kFirst) {
          // Without optimized_softmax the first block also comes here, with row_max = -inf: the
          // factor is 0, and O and l are still 0.
          float const rescale = ptx::exp2_approx(row_max[mt][kH] * p.score_scale_log2 - max_scaled);
          row_sum[mt][kH] *= rescale;
          static_for<Tr::kDTiles>([&](auto dn) {
            o_acc[mt][dn][2 * kH] *= rescale;
            o_acc[mt][dn][2 * kH + 1] *= rescale;
          });
        }
        row_max[mt][kH] = new_max;
        float sum = 0.f;
        static_for<Tr::kKeyTiles>([&](auto n) {
          static_for<2>([&](auto e) {
            float& x = s[mt][n][2 * kH + decltype(e)::value];
            x = ptx::exp2_approx(fmaf(x, p.score_scale_log2, -max_scaled));
            sum += x;
          });
        });
        // Partial sums stay per lane; the quad reduction happens once, in the epilogue.
        row_sum[mt][kH] = kFirst ? sum : row_sum[mt][kH] + sum;
      });
    });

    // P as A fragments: accumulator tiles 2j and 2j+1 of an m16 row tile are exactly the A operand
    // of k16 step j.
    uint32_t p_frag[Tr::kKeySteps][kMT][4];
    static_for<Tr::kKeySteps>([&](auto j) {
      static_for<kMT>([&](auto mt) {
        constexpr int kJ = decltype(j)::value;
        p_frag[j][mt][0] = ptx::pack2<T>(s[mt][2 * kJ][0], s[mt][2 * kJ][1]);
        p_frag[j][mt][1] = ptx::pack2<T>(s[mt][2 * kJ][2], s[mt][2 * kJ][3]);
        p_frag[j][mt][2] = ptx::pack2<T>(s[mt][2 * kJ + 1][0], s[mt][2 * kJ + 1][1]);
        p_frag[j][mt][3] = ptx::pack2<T>(s[mt][2 * kJ + 1][2], s[mt][2 * kJ + 1][3]);
      });
    });

    // O += P V                                                          // (rows/warp, d_head)
    uint32_t v_frag[Tr::kKeySteps][Tr::kDTiles][2];
    pipelined_gemm<Tr::kKeySteps, Tr::kPVGroup, C.mma_double_buffer_loads>(
        [&](auto kt) {
          static_for<Tr::kDTiles / 2>([&](auto dp) {
            uint32_t r[4];
            ptx::ldmatrix_x4_trans(
                r, v_addr.template at<decltype(kt)::value * 16, decltype(dp)::value * 16>());
            v_frag[kt][2 * dp][0] = r[0];
            v_frag[kt][2 * dp][1] = r[1];
            v_frag[kt][2 * dp + 1][0] = r[2];
            v_frag[kt][2 * dp + 1][1] = r[3];
          });
        },
        [&](auto kt) {
          static_for<Tr::kDTiles>([&](auto dn) {
            static_for<kMT>([&](auto mt) {
              ptx::mma_m16n8k16<T>(o_acc[mt][dn], p_frag[kt][mt], v_frag[kt][dn]);
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

  // Epilogue: finish the row sums across each quad and normalise. A row without any visible key
  // has sum 0: its output is 0 and its LSE -inf. Sinks join the denominator here, unless the
  // keys are split (the combine kernel adds them once).
  bool const split_out = num_splits > 1;
  float const* const sinks = split_out || !kGeneral ? nullptr : p.sinks;
  static_for<kMT>([&](auto mt) {
    static_for<2>([&](auto h) {
      constexpr int kH = decltype(h)::value;
      float sum = row_sum[mt][kH];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      int const row = warp * Tr::kRowsPerWarp + decltype(mt)::value * 16 + g + 8 * kH;
      // The running max in natural-log units, and the row's LSE.
      float top = sum > 0.f ? row_max[mt][kH] * p.lse_scale : -INFINITY;
      float out_scale = 1.f;
      if (sinks != nullptr && row < q_rows) {
        // l' = l e^(m - M) + e^(sink - M) with M = max(m, sink), in natural-log units.
        float const sink = sinks[head_of(row)];
        float const m = top;
        top = fmaxf(m, sink);
        out_scale = m == -INFINITY ? 0.f : __expf(m - top);
        sum = sum * out_scale + (sink == -INFINITY ? 0.f : __expf(sink - top));  // -inf: no sink
      }
      float const inv = sum > 0.f ? out_scale / sum : 0.f;
      float const lse = sum > 0.f ? top + logf(sum) : -INFINITY;
      static_for<Tr::kDTiles>([&](auto dn) {
        o_acc[mt][dn][2 * kH] *= inv;
        o_acc[mt][dn][2 * kH + 1] *= inv;
      });
      if (row >= q_rows) return;
      int const query = query_of(row);
      int const head = head_of(row);
      if (split_out) {
        // Partial results in fp32, straight from registers: rows of the split are
        // rows x heads_q x d floats, each lane holding two adjacent columns per n8 tile.
        int64_t const out_row = (layout == kLayoutVarlen ? seq.q_first : batch * p.seqlen_q) + query;
        int64_t const slot = int64_t(split) * p.partial_rows + out_row;
        float* dst = p.o_partial + (slot * p.heads_q + head) * C.d_head + 2 * t;
        static_for<Tr::kDTiles>([&](auto dn) {
          *reinterpret_cast<float2*>(dst + decltype(dn)::value * 8) =
              make_float2(o_acc[mt][dn][2 * kH], o_acc[mt][dn][2 * kH + 1]);
        });
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
  static_for<kMT>([&](auto mt) {
    static_for<2>([&](auto h) {
      constexpr int kH = decltype(h)::value;
      int const row = warp * Tr::kRowsPerWarp + decltype(mt)::value * 16 + g + 8 * kH;
      static_for<Tr::kDTiles>([&](auto dn) {
        int const col = decltype(dn)::value * 8;
        *reinterpret_cast<uint32_t*>(sQ + tile_offset<C.B_r, C.swizzled>(row, col) + 2 * t) =
            ptx::pack2<T>(o_acc[mt][dn][2 * kH], o_acc[mt][dn][2 * kH + 1]);
      });
    });
  });
  __syncthreads();  // O rows are written per warp and read back by every thread
  T* const o_base = static_cast<T*>(p.o) + batch * p.o_batch_stride + seq.q_first * p.o_seq_stride;
  constexpr int kPasses = C.B_r / Tr::kCopyRows;
  int const row0 = tid / 8;
  int const col0 = (tid % 8) * 8;
  uint32_t const src = ptx::smem_addr(sQ) + 2 * tile_offset<C.B_r, C.swizzled>(row0, col0);
  static_for<kPasses>([&](auto i) {
    constexpr int kRow = decltype(i)::value * Tr::kCopyRows;
    int const r = row0 + kRow;
    if (r < q_rows) {
      T* dst = o_base + int64_t(query_of(r)) * p.o_seq_stride + int64_t(head_of(r)) * p.o_head_stride + col0;
      static_for<Tr::kSlabs>([&](auto sl) {
        constexpr int kCol = decltype(sl)::value * 64;
        *reinterpret_cast<uint4*>(dst + kCol) =
            ptx::ld_shared_16(src + 2 * (kCol / 64 * C.B_r * 64 + kRow * 64));
      });
    }
  });
}

template <class Tag, bool kGeneral>
__global__ void __launch_bounds__(Traits<Tag::kConfig>::kThreads)
    forward_kernel(__grid_constant__ ForwardParams const p) {
  forward_block<Tag::kConfig, kGeneral>(p);
}

template <KernelConfig C>
cudaError_t prepare_kernel() {
  if constexpr (Traits<C>::kSmemBytes > 48 * 1024) {
    for (auto kernel : {forward_kernel<ConfigTag<C>, false>, forward_kernel<ConfigTag<C>, true>}) {
      if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               Traits<C>::kSmemBytes);
          e != cudaSuccess) {
        return e;
      }
    }
  }
  return cudaSuccess;
}

template <KernelConfig C>
cudaError_t kernel_attributes(cudaFuncAttributes* out) {
  return cudaFuncGetAttributes(out, forward_kernel<ConfigTag<C>, true>);
}

// The general instantiation's: decode and split-KV, whose schedule uses it, run that one.
template <KernelConfig C>
cudaError_t kernel_occupancy(int* blocks_per_sm) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      blocks_per_sm, forward_kernel<ConfigTag<C>, true>, Traits<C>::kThreads, Traits<C>::kSmemBytes);
}

template <KernelConfig C>
cudaError_t launch_kernel(ForwardParams const& params, dim3 grid, bool general, cudaStream_t stream) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(Traits<C>::kThreads);
  config.dynamicSmemBytes = Traits<C>::kSmemBytes;
  config.stream = stream;
  return general ? cudaLaunchKernelEx(&config, forward_kernel<ConfigTag<C>, true>, params)
                 : cudaLaunchKernelEx(&config, forward_kernel<ConfigTag<C>, false>, params);
}

// Instantiates the kernel for C and adds it to the registry (called from the generated files).
template <KernelConfig C>
void register_kernel(Registry& registry) {
  registry.emplace(C, KernelEntry{C, &prepare_kernel<C>, &kernel_attributes<C>, &kernel_occupancy<C>,
                                  &launch_kernel<C>});
}

}  // namespace fa::cuda
