// Shared-memory tiles of the mma.sync family: the swizzled layout, ldmatrix addresses, and the
// global-to-shared copies of Q, K and V (cp.async or synchronous, bounded at a sequence's end).
#pragma once

#include "cuda/ptx.cuh"
#include "cuda/sm80/traits.cuh"

namespace fa::cuda::sm80 {
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
// and (R, C) a step with R % 8 == 0 and C % 16 == 0, constant in the caller's unrolled loops. The
// swizzled 16-byte chunk is ((C % 64) / 8 + c0 / 8) ^ (r0 % 8); C only moves chunk bits 1 and 2,
// so the four addresses for (C % 64) / 16 = 0..3 are computed once, and every ldmatrix becomes
// base + a constant that folds into its immediate offset. Computing the XOR per instruction
// instead cost about 4 integer instructions per ldmatrix (the PTX of a (64, 64) kernel had 8
// adds and shifts per mma).
template <int kRows, bool kSwizzled>
struct LdsmAddress {
  uint32_t base[4];

  __device__ __forceinline__ LdsmAddress(uint32_t tile, int r0, int c0) {
#pragma unroll
    for (int j = 0; j < 4; ++j) base[j] = tile + 2 * tile_offset<kRows, kSwizzled>(r0, 16 * j + c0);
  }
  __device__ __forceinline__ uint32_t at(int row_step, int col_step) const {
    return base[(col_step % 64) / 16] + 2 * ((col_step / 64) * kRows * 64 + row_step * 64);
  }
};

// Copies a kRows x d_head tile from global memory into shared memory; row_ptr(i, r) is the start
// of tile row r (r < kRows), the thread's row of pass i (a compile-time constant), in global memory: a fixed stride for dense tensors, a page lookup for a
// paged cache, a per-row head for packed GQA queries.
// Thread t moves the 16-byte chunk t % 8 of rows t / 8, t / 8 + kCopyRows, ... in each slab; the
// row step keeps row % 8, so the thread's swizzled chunk is the same in every pass and the shared
// address is one base plus a constant. With kBounded, rows at or past `rows` (the end of the
// sequence) are filled with zeros instead, and their address is never formed: zero K rows give
// finite scores that the mask then removes, and zero V rows meet P = 0, never 0 * NaN. Chunks at
// or past head_dim (the tensor's: head_dim_v for V; below the kernel's, a multiple of 8) are
// zero-filled and never read: Q K^T and P V over zero columns add nothing.
template <KernelConfig C, int kRows, bool kBounded, class RowPtr>
__device__ __forceinline__ void load_tile(typename Traits<C>::T* smem, RowPtr const& row_ptr,
                                          typename Traits<C>::T const* any_valid, int tid,
                                          int rows, int head_dim) {
  using Tr = Traits<C>;
  using T = typename Tr::T;
  constexpr int kPasses = kRows / Tr::kCopyRows;
  int const row0 = tid / 8;
  int const col0 = (tid % 8) * 8;
  uint32_t const dst = ptx::smem_addr(smem) + 2 * tile_offset<kRows, C.swizzled>(row0, col0);
  auto dst_at = [&](int s, int i) {
    return dst + 2 * (s * kRows * 64 + i * Tr::kCopyRows * 64);
  };
  auto in_bounds = [&](int i) { return !kBounded || row0 + i * Tr::kCopyRows < rows; };
  auto in_head = [&](int s) { return col0 + s * 64 < head_dim; };
  bool const whole_rows = head_dim >= C.d_head;  // uniform: the usual case takes no predicate
  // Pass by pass: each row's address (a page lookup for a paged cache) is formed once and
  // serves every slab, and only one is live at a time; an array of them would hold 2 registers
  // per pass through the copy, which the key loop (register-bound at 255) cannot spare.
  auto src_of = [&](int i) {
    return in_bounds(i) ? row_ptr(i, row0 + i * Tr::kCopyRows) + col0 : any_valid;
  };
  if constexpr (C.async_copy) {
    unrolled_for<kPasses>([&](int i) {
      T const* const src = src_of(i);
      unrolled_for<Tr::kSlabs>([&](int s) {
        if (kBounded || !whole_rows) {
          ptx::cp_async_16_zfill(dst_at(s, i), src + s * 64,
                                 in_bounds(i) && in_head(s));
        } else {
          ptx::cp_async_16(dst_at(s, i), src + s * 64);
        }
      });
    });
  } else {
    // Synchronous: all loads are issued before the first store so they overlap in flight.
    uint4 staged[Tr::kSlabs][kPasses];
    unrolled_for<kPasses>([&](int i) {
      T const* const src = src_of(i);
      unrolled_for<Tr::kSlabs>([&](int s) {
        staged[s][i] = in_bounds(i) && in_head(s)
                           ? *reinterpret_cast<uint4 const*>(src + s * 64)
                           : make_uint4(0, 0, 0, 0);
      });
    });
    unrolled_for<Tr::kSlabs>([&](int s) {
      unrolled_for<kPasses>([&](int i) { ptx::st_shared_16(dst_at(s, i), staged[s][i]); });
    });
  }
}

// load_tile for a block that may be the partial last one of its sequence.
template <KernelConfig C, int kRows, class RowPtr>
__device__ __forceinline__ void load_block(typename Traits<C>::T* smem, RowPtr const& row_ptr,
                                           typename Traits<C>::T const* any_valid, int tid,
                                           int rows, int head_dim) {
  if (rows >= kRows) {
    load_tile<C, kRows, false>(smem, row_ptr, any_valid, tid, rows, head_dim);
  } else {
    load_tile<C, kRows, true>(smem, row_ptr, any_valid, tid, rows, head_dim);
  }
}

// An e4m3 K or V tile (an FP8 cache) in two steps, so the 16-bit tile and its ldmatrix reads
// stay as they are. load_tile_e4m3 copies the bytes with 16-byte cp.async into `staging`
// (config.hpp's e4m3_smem_bytes: one 16-byte slot per thread, pass and chunk slot, consecutive threads in
// consecutive slots); after the thread's own wait_loads, convert_tile_e4m3 turns its slots into
// the 16-bit tile's chunks (same rows as load_tile's, same swizzle), so no barrier more than
// the 16-bit path's is needed: a thread converts only what it copied. A row's d_head bytes are
// d_head / 16 chunks; its 8 threads take chunks tid % 8, tid % 8 + 8, ... (d 64: 4 of them
// idle; d 192: 4 take two). 8-byte copies of the 16-bit path's chunks instead moved the cache
// at 1.6 TB/s on the H200 (d 128 decode; 4.5 TB/s in bf16 with 16-byte ones): the copies in
// flight, not their bytes, bound a decode block. The rows need 16-byte alignment (strides in
// whole 16-element units, cannot_run); chunks past head_dim read 8 bytes or none and are
// zero-filled, as are rows past `rows`; with kWhole (a block of whole rows at the kernel's head
// dim) every chunk is a plain 16-byte copy (load_warp_rows_e4m3 says why).
template <KernelConfig C>
struct E4M3Tile {
  static constexpr int kChunks = C.d_head / 16;       // 16-byte e4m3 chunks per row
  static constexpr int kSlots = (kChunks + 7) / 8;    // chunks per thread and row, at most
};

template <KernelConfig C, int kRows, bool kBounded, bool kWhole, class RowPtr>
__device__ __forceinline__ void load_tile_e4m3(uint32_t staging, RowPtr const& row_ptr,
                                               uint8_t const* any_valid, int tid, int rows,
                                               int head_dim) {
  using Tr = Traits<C>;
  using E = E4M3Tile<C>;
  static_assert(C.async_copy, "e4m3 tiles are staged with cp.async");
  constexpr int kPasses = kRows / Tr::kCopyRows;
  int const row0 = tid / 8;
  unrolled_for<kPasses>([&](int i) {
    bool const in_rows = !kBounded || row0 + i * Tr::kCopyRows < rows;
    uint8_t const* const src = in_rows ? row_ptr(i, row0 + i * Tr::kCopyRows) : any_valid;
    unrolled_for<E::kSlots>([&](int m) {
      int const col = 16 * (tid % 8 + 8 * m);
      uint32_t const slot = staging + 16 * ((i * E::kSlots + m) * Tr::kThreads + tid);
      if constexpr (kWhole) {
        if (col < C.d_head) ptx::cp_async_16(slot, src + col);
      } else if (col < C.d_head) {
        int const bytes = in_rows ? max(0, min(16, head_dim - col)) : 0;
        ptx::cp_async_16_bytes(slot, bytes > 0 ? src + col : any_valid, bytes);
      }
    });
  });
}

// The 16-bit tile is in M, the type of the MMAs: fp16 for both query types on e4m3 tiles
// (one cvt per pair on sm_89+ where bf16 takes five instructions; see q_for_mma).
template <KernelConfig C, int kRows, class M>
__device__ __forceinline__ void convert_tile_e4m3(typename Traits<C>::T* smem, uint32_t staging,
                                                  int tid) {
  using Tr = Traits<C>;
  using E = E4M3Tile<C>;
  constexpr int kPasses = kRows / Tr::kCopyRows;
  // Four passes' loads before their conversions and stores (the volatile copies keep their
  // order: one load at a time, each behind the store before it, waited on shared memory).
  constexpr int kBatch = kPasses < 4 ? kPasses : 4;
  static_assert(kPasses % kBatch == 0, "whole batches of passes");
  uint32_t const tile = ptx::smem_addr(smem);
  int const row0 = tid / 8;
  // Threads 4-7 of a row write their second 16-bit chunk first: the 8 threads of a row write
  // 16-bit chunks 2j (or 2j + 1) of 16 per row, and chunks c and c + 8 share banks, so with
  // every thread's first store at 2j two of them met in each bank group (ncu, H200 decode:
  // 2.1 wavefronts per shared store against 1), and with the swap the 8 are distinct.
  bool const swap = tid % 8 >= 4;
  unrolled_for<E::kSlots>([&](int m) {
    int const col = 16 * (tid % 8 + 8 * m);
    if (col < C.d_head) {
      // The two 16-bit chunks of this e4m3 chunk, in the order this thread writes them, and
      // the 8 staged bytes each comes from; a pass moves the row by kCopyRows (a multiple of
      // 8), which keeps the swizzle, so each address is a base plus a constant.
      uint32_t const lo = tile + 2 * tile_offset<kRows, C.swizzled>(row0, col);
      uint32_t const hi = tile + 2 * tile_offset<kRows, C.swizzled>(row0, col + 8);
      uint32_t const first = swap ? hi : lo, second = swap ? lo : hi;
      uint32_t const from =
          staging + 16 * (m * Tr::kThreads + tid) + (swap ? 8u : 0u);
      constexpr uint32_t kPassBytes = 16 * E::kSlots * Tr::kThreads;
      unrolled_for<kPasses / kBatch>([&](int g) {
        uint32_t word[kBatch][4];
        unrolled_for<kBatch>([&](int b) {
          uint32_t const at = (g * kBatch + b) * kPassBytes;
          asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n"
                       : "=r"(word[b][0]), "=r"(word[b][1])
                       : "r"(from + at));
          asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n"
                       : "=r"(word[b][2]), "=r"(word[b][3])
                       : "r"((from ^ 8u) + at));
        });
        unrolled_for<kBatch>([&](int b) {
          uint32_t const step = 2 * (g * kBatch + b) * Tr::kCopyRows * 64;
          uint2 const p0 = ptx::e4m3x4_to<M>(word[b][0]);
          uint2 const p1 = ptx::e4m3x4_to<M>(word[b][1]);
          uint2 const p2 = ptx::e4m3x4_to<M>(word[b][2]);
          uint2 const p3 = ptx::e4m3x4_to<M>(word[b][3]);
          ptx::st_shared_16(first + step, make_uint4(p0.x, p0.y, p1.x, p1.y));
          ptx::st_shared_16(second + step, make_uint4(p2.x, p2.y, p3.x, p3.y));
        });
      });
    }
  });
}

template <KernelConfig C, int kRows, class RowPtr>
__device__ __forceinline__ void load_block_e4m3(uint32_t staging, RowPtr const& row_ptr,
                                                uint8_t const* any_valid, int tid, int rows,
                                                int head_dim) {
  if (rows >= kRows && head_dim >= C.d_head) {
    load_tile_e4m3<C, kRows, false, true>(staging, row_ptr, any_valid, tid, rows, head_dim);
  } else if (rows >= kRows) {
    load_tile_e4m3<C, kRows, false, false>(staging, row_ptr, any_valid, tid, rows, head_dim);
  } else {
    load_tile_e4m3<C, kRows, true, false>(staging, row_ptr, any_valid, tid, rows, head_dim);
  }
}

// The key split's e4m3 tiles (kernel.cuh's kE4M3Kv with kKeySplit), read by ldmatrix straight
// into MMA fragments: no 16-bit copy of K or V in shared memory. Converting each tile into a
// 16-bit one moved 6 bytes through shared memory per cache byte (the copy's write, the
// conversion's read and write, ldmatrix's read: 192 KiB per 128-key block at d 128 against
// 128 bytes per clock), about the time the SM's share of DRAM takes to bring the 32 KiB in.
// A tile is d_head / 64 slabs of kRows rows x 64 bytes; 16-byte chunk c of row r sits at chunk
// c ^ ((r / 2) % 4) of its row, so the 8 rows of an ldmatrix phase (at 64-byte strides: two rows
// per 128-byte bank line) fall in 8 distinct bank groups, as do 8 rows x 4 chunks of a copy.
template <int kRows>
__device__ __forceinline__ uint32_t e4m3_tile_offset(int row, int chunk) {
  return uint32_t((chunk / 4) * (kRows * 64) + row * 64 + (((chunk % 4) ^ ((row / 2) % 4)) * 16));
}

// One lane's ldmatrix addresses in such a tile: row r0 + R and chunk c0 + C for a step (R, C),
// constant in the caller's unrolled loops, with R % 8 == 0 (keeps (r / 2) % 4) and
// (C % 4) + c0 <= 3 (c0 is 0, or 1 with C even), so every address is one of four bases plus a
// constant.
template <int kRows>
struct E4M3LdsmAddress {
  uint32_t base[4];

  __device__ __forceinline__ E4M3LdsmAddress(uint32_t tile, int r0, int c0) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      base[j] = tile + r0 * 64 + ((min(j + c0, 3) ^ ((r0 / 2) % 4)) * 16);
    }
  }
  __device__ __forceinline__ uint32_t at(int row_step, int chunk) const {
    return base[chunk % 4] + (chunk / 4) * (kRows * 64) + row_step * 64;
  }
};

// A warp's kWarpRows rows from tile row `first` of an e4m3 K or V tile, by that warp alone
// (cp.async; the warp then waits and meets __syncwarp, no other warp is involved): lane l
// moves chunk l % 4 of each slab of rows first + l / 4 + 8 i. row_ptr(i, r) is tile row r's start
// in global memory for pass i. Rows at or past `rows` and bytes at or past head_dim are
// zero-filled (cp_async_16_bytes), their addresses never formed; with kWhole (every row below
// `rows`, head_dim the kernel's) each chunk is a plain 16-byte copy.
template <KernelConfig C, int kRows, int kWarpRows, bool kWhole, class RowPtr>
__device__ __forceinline__ void copy_warp_rows_e4m3(uint32_t tile, RowPtr const& row_ptr,
                                                    uint8_t const* any_valid, int first, int lane,
                                                    int rows, int head_dim) {
  static_assert(kWarpRows % 8 == 0 && C.d_head % 64 == 0, "8-row passes, whole slabs");
  unrolled_for<kWarpRows / 8>([&](int i) {
    int const r = first + lane / 4 + 8 * i;
    bool const in_rows = kWhole || r < rows;
    uint8_t const* const src = in_rows ? row_ptr(i, r) : any_valid;
    unrolled_for<C.d_head / 64>([&](int s) {
      int const chunk = 4 * s + lane % 4;
      if constexpr (kWhole) {
        ptx::cp_async_16(tile + e4m3_tile_offset<kRows>(r, chunk), src + 16 * chunk);
      } else {
        int const bytes = in_rows ? max(0, min(16, head_dim - 16 * chunk)) : 0;
        ptx::cp_async_16_bytes(tile + e4m3_tile_offset<kRows>(r, chunk),
                               bytes > 0 ? src + 16 * chunk : any_valid, bytes);
      }
    });
  });
}

// copy_warp_rows_e4m3, with plain copies where the warp's rows and columns are all there (every
// block but a sequence's last, at the kernel's head dim): the zero-filling form (SASS
// LDGSTS...ZFILL) costs 8 shared-memory wavefronts a copy instruction where the plain one costs
// 4 (ncu, H200, the sm90 gather: docs/performance.md session 58).
template <KernelConfig C, int kRows, int kWarpRows, class RowPtr>
__device__ __forceinline__ void load_warp_rows_e4m3(uint32_t tile, RowPtr const& row_ptr,
                                                    uint8_t const* any_valid, int first, int lane,
                                                    int rows, int head_dim) {
  if (first + kWarpRows <= rows && head_dim >= C.d_head) {
    copy_warp_rows_e4m3<C, kRows, kWarpRows, true>(tile, row_ptr, any_valid, first, lane, rows,
                                                   head_dim);
  } else {
    copy_warp_rows_e4m3<C, kRows, kWarpRows, false>(tile, row_ptr, any_valid, first, lane, rows,
                                                    head_dim);
  }
}

// Q for the MMAs against an e4m3 cache, rewritten in place. kToFp16 (bf16 queries): each row
// as fp16 times a power of two 2^-k (ptx.cuh's bf16x8_to_fp16 says how and why), so the MMAs
// run in fp16 with the cache decoded into fp16; 2^k goes to row_scale[row] for the scores.
// kPairOrder (the key split's tiles, kernel.cuh's kDirect): each 16-column group's pairs
// reordered (0, 2, 4, 6, 1, 3, 5, 7). A lane's K fragment, ldmatrix'd from e4m3 bytes, holds
// columns 4t..4t+3 of its key where the MMA's B operand expects 2t, 2t + 1, 2t + 8, 2t + 9:
// Q's columns are permuted to match (Q K^T sums over them). All kThreads threads,
// kThreads / B_r per row (2 at B_r 64, 4 warps), after Q has landed and before any thread
// reads it (the caller's barriers).
template <KernelConfig C, bool kToFp16, bool kPairOrder>
__device__ __forceinline__ void q_for_mma(typename Traits<C>::T* sQ, float* row_scale, int tid) {
  using Tr = Traits<C>;
  constexpr int kPerRow = Tr::kThreads / C.B_r;
  static_assert(kPerRow >= 1 && Tr::kThreads % C.B_r == 0, "whole threads per row");
  constexpr int kGroups = C.d_head / 16 / kPerRow;  // 16-column groups of a row per thread
  static_assert(kGroups * kPerRow * 16 == C.d_head, "whole groups per thread");
  int const row = tid / kPerRow;
  uint32_t const tile = ptx::smem_addr(sQ);
  auto at = [&](int j, int half) {
    return tile + 2 * tile_offset<C.B_r, C.swizzled>(row, 16 * (tid % kPerRow + kPerRow * j) +
                                                              8 * half);
  };
  float down = 1.f;
  if constexpr (kToFp16) {
    float mx = 0.f;
#pragma unroll
    for (int j = 0; j < kGroups; ++j) {
      mx = ptx::bf16x8_abs_max(ptx::ld_shared_16(at(j, 0)), mx);
      mx = ptx::bf16x8_abs_max(ptx::ld_shared_16(at(j, 1)), mx);
    }
#pragma unroll
    for (int m = 1; m < kPerRow; m *= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, m));
    int const k = ptx::bf16_row_exponent(mx);
    down = ptx::pow2(-k);
    if (tid % kPerRow == 0) row_scale[row] = ptx::pow2(k);
  }
#pragma unroll
  for (int j = 0; j < kGroups; ++j) {
    uint4 lo = ptx::ld_shared_16(at(j, 0));
    uint4 hi = ptx::ld_shared_16(at(j, 1));
    if constexpr (kToFp16) {
      lo = ptx::bf16x8_to_fp16(lo, down);
      hi = ptx::bf16x8_to_fp16(hi, down);
    }
    if constexpr (kPairOrder) {
      ptx::st_shared_16(at(j, 0), make_uint4(lo.x, lo.z, hi.x, hi.z));
      ptx::st_shared_16(at(j, 1), make_uint4(lo.y, lo.w, hi.y, hi.w));
    } else {
      ptx::st_shared_16(at(j, 0), lo);
      ptx::st_shared_16(at(j, 1), hi);
    }
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

}  // namespace fa::cuda::sm80
