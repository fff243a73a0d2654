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

// Copies a kRows x d_head tile from global memory (row stride `ld` elements) into shared memory.
// Thread t moves the 16-byte chunk t % 8 of rows t / 8, t / 8 + kCopyRows, ... in each slab; the
// row step keeps row % 8, so the thread's swizzled chunk is the same in every pass and the shared
// address is one base plus a constant. With kBounded, rows at or past `rows` (the end of the
// sequence) are filled with zeros instead: zero K rows give finite scores that the mask then
// removes, and zero V rows meet P = 0, never 0 * NaN.
template <KernelConfig C, int kRows, bool kBounded>
__device__ __forceinline__ void load_tile(typename Traits<C>::T* smem,
                                          typename Traits<C>::T const* gmem, int64_t ld, int tid,
                                          int rows) {
  using Tr = Traits<C>;
  using T = typename Tr::T;
  constexpr int kPasses = kRows / Tr::kCopyRows;
  int const row0 = tid / 8;
  int const col0 = (tid % 8) * 8;
  uint32_t const dst = ptx::smem_addr(smem) + 2 * tile_offset<kRows, C.swizzled>(row0, col0);
  T const* src = gmem + row0 * ld + col0;
  int64_t const pass_step = Tr::kCopyRows * ld;
  auto dst_at = [&](auto s, auto i) {
    return dst + 2 * (decltype(s)::value * kRows * 64 + decltype(i)::value * Tr::kCopyRows * 64);
  };
  auto src_at = [&](auto s, auto i) { return src + decltype(i)::value * pass_step + decltype(s)::value * 64; };
  auto in_bounds = [&](auto i) { return !kBounded || row0 + decltype(i)::value * Tr::kCopyRows < rows; };
  if constexpr (C.async_copy) {
    static_for<Tr::kSlabs>([&](auto s) {
      static_for<kPasses>([&](auto i) {
        if constexpr (kBounded) {
          bool const valid = in_bounds(i);
          ptx::cp_async_16_zfill(dst_at(s, i), valid ? src_at(s, i) : gmem, valid);
        } else {
          ptx::cp_async_16(dst_at(s, i), src_at(s, i));
        }
      });
    });
  } else {
    // Synchronous: all loads are issued before the first store so they overlap in flight.
    uint4 staged[Tr::kSlabs][kPasses];
    static_for<Tr::kSlabs>([&](auto s) {
      static_for<kPasses>([&](auto i) {
        staged[s][i] = in_bounds(i) ? *reinterpret_cast<uint4 const*>(src_at(s, i))
                                    : make_uint4(0, 0, 0, 0);
      });
    });
    static_for<Tr::kSlabs>([&](auto s) {
      static_for<kPasses>([&](auto i) { ptx::st_shared_16(dst_at(s, i), staged[s][i]); });
    });
  }
}

// load_tile for a block that may be the partial last one of its sequence.
template <KernelConfig C, int kRows>
__device__ __forceinline__ void load_block(typename Traits<C>::T* smem,
                                           typename Traits<C>::T const* gmem, int64_t ld, int tid,
                                           int rows) {
  if (rows >= kRows) {
    load_tile<C, kRows, false>(smem, gmem, ld, tid, rows);
  } else {
    load_tile<C, kRows, true>(smem, gmem, ld, tid, rows);
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

template <KernelConfig C>
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
  int const head = static_cast<int>((blockIdx.x / p.n_q_blocks) % p.heads_q);
  int64_t const batch = blockIdx.x / (static_cast<int64_t>(p.n_q_blocks) * p.heads_q);
  int const kv_head = head / p.q_heads_per_kv;
  int const q_row0 = q_block * C.B_r;
  int const q_rows = min(C.B_r, p.seqlen_q - q_row0);

  T const* gQ = static_cast<T const*>(p.q) + batch * p.q_batch_stride + head * p.q_head_stride +
                q_row0 * p.q_seq_stride;
  T const* gK = static_cast<T const*>(p.k) + batch * p.k_batch_stride + kv_head * p.k_head_stride;
  T const* gV = static_cast<T const*>(p.v) + batch * p.v_batch_stride + kv_head * p.v_head_stride;
  T* gO = static_cast<T*>(p.o) + batch * p.o_batch_stride + head * p.o_head_stride +
          q_row0 * p.o_seq_stride;

  // Key blocks to visit: all of them, or under the causal mask those holding a key visible to the
  // block's last row (blocks entirely above the diagonal are skipped, not computed).
  int n_blocks = (p.seqlen_k + C.B_c - 1) / C.B_c;
  if (p.causal) {
    int const last_key = q_row0 + q_rows - 1 + p.causal_offset;
    n_blocks = last_key < 0 ? 0 : min(n_blocks, last_key / C.B_c + 1);
  }
  // A block needs masking when it runs past seqlen_k, or when under the causal mask some key in it
  // is invisible to the block's first row.
  auto needs_mask = [&](int block) {
    int const end = (block + 1) * C.B_c;
    return end > p.seqlen_k || (p.causal && end - 1 > q_row0 + p.causal_offset);
  };
  auto kv_rows = [&](int block) { return p.seqlen_k - block * C.B_c; };
  int64_t const k_block_step = int64_t(C.B_c) * p.k_seq_stride;
  int64_t const v_block_step = int64_t(C.B_c) * p.v_seq_stride;

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

  load_block<C, C.B_r>(sQ, gQ, p.q_seq_stride, tid, q_rows);
  commit_loads<C>();
  if constexpr (C.eager_load_blocks) {
    if (n_blocks > 0) {
      load_block<C, C.B_c>(sK, gK, p.k_seq_stride, tid, kv_rows(0));
      commit_loads<C>();
    }
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
    if (C.eager_load_blocks && n_blocks > 0) {
      wait_loads<C, 1>();  // Q landed; K[0] may still be in flight
    } else {
      wait_loads<C, 0>();
    }
    __syncthreads();
    static_for<Tr::kDSteps>(load_q);
  }

  float o_acc[kMT][Tr::kDTiles][4] = {};
  float row_max[kMT][2];
  float row_sum[kMT][2] = {};
  static_for<kMT>([&](auto mt) {
    row_max[mt][0] = -INFINITY;
    row_max[mt][1] = -INFINITY;
  });

  auto process_block = [&](int block, auto is_first) {
    constexpr bool kFirst = decltype(is_first)::value;
    if constexpr (!C.eager_load_blocks) {
      load_block<C, C.B_c>(sK, gK + block * k_block_step, p.k_seq_stride, tid, kv_rows(block));
      commit_loads<C>();
    }
    // K[block] visible to all warps; every warp is past its P V on the previous V tile.
    wait_loads<C, 0>();
    __syncthreads();
    if constexpr (C.eager_load_blocks) {  // V[block] streams in under Q K^T
      load_block<C, C.B_c>(sV, gV + block * v_block_step, p.v_seq_stride, tid, kv_rows(block));
      commit_loads<C>();
    }

    // S = Q K^T                                                             // (rows/warp, B_c)
    float s[kMT][Tr::kKeyTiles][4] = {};
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

    if constexpr (!C.eager_load_blocks) {
      load_block<C, C.B_c>(sV, gV + block * v_block_step, p.v_seq_stride, tid, kv_rows(block));
      commit_loads<C>();
    }
    // V[block] visible; every warp is done reading K[block].
    wait_loads<C, 0>();
    __syncthreads();
    if constexpr (C.eager_load_blocks) {  // K[block + 1] streams in under softmax and P V
      if (block + 1 < n_blocks) {
        load_block<C, C.B_c>(sK, gK + (block + 1) * k_block_step, p.k_seq_stride, tid,
                             kv_rows(block + 1));
        commit_loads<C>();
      }
    }

    // Keys past seqlen_k, or after the row's causal limit, score -inf.
    if (needs_mask(block)) {
      static_for<kMT>([&](auto mt) {
        static_for<2>([&](auto h) {
          int const row = q_row0 + warp * Tr::kRowsPerWarp + decltype(mt)::value * 16 + g +
                          8 * decltype(h)::value;
          int const limit = p.causal ? min(p.seqlen_k - 1, row + p.causal_offset) : p.seqlen_k - 1;
          static_for<Tr::kKeyTiles>([&](auto n) {
            static_for<2>([&](auto e) {
              int const key = block * C.B_c + decltype(n)::value * 8 + 2 * t + decltype(e)::value;
              if (key > limit) s[mt][n][2 * decltype(h)::value + decltype(e)::value] = -INFINITY;
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
        float const max_scaled = new_max == -INFINITY ? 0.f : new_max * p.scale_log2;
        if constexpr (!kFirst) {
          // Without optimized_softmax the first block also comes here, with row_max = -inf: the
          // factor is 0, and O and l are still 0.
          float const rescale = ptx::exp2_approx(row_max[mt][kH] * p.scale_log2 - max_scaled);
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
            x = ptx::exp2_approx(fmaf(x, p.scale_log2, -max_scaled));
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
    if (n_blocks > 0) process_block(0, std::true_type{});
    for (int block = 1; block < n_blocks; ++block) process_block(block, std::false_type{});
  } else {
    for (int block = 0; block < n_blocks; ++block) process_block(block, std::false_type{});
  }
  if (n_blocks == 0) {
    // A causal block above the diagonal visits no key block, so nothing has waited for its Q
    // copy yet; it must land before O overwrites Q's region.
    wait_loads<C, 0>();
    __syncthreads();
  }

  // Epilogue: finish the row sums across each quad, normalise, write LSE and O. A row without any
  // visible key has sum 0: its output is 0 and its LSE -inf.
  static_for<kMT>([&](auto mt) {
    static_for<2>([&](auto h) {
      constexpr int kH = decltype(h)::value;
      float sum = row_sum[mt][kH];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      float const inv = sum > 0.f ? 1.f / sum : 0.f;
      static_for<Tr::kDTiles>([&](auto dn) {
        o_acc[mt][dn][2 * kH] *= inv;
        o_acc[mt][dn][2 * kH + 1] *= inv;
      });
      int const row = warp * Tr::kRowsPerWarp + decltype(mt)::value * 16 + g + 8 * kH;
      if (p.lse != nullptr && t == 0 && row < q_rows) {
        p.lse[(batch * p.heads_q + head) * p.seqlen_q + q_row0 + row] =
            sum > 0.f ? row_max[mt][kH] * p.softmax_scale + logf(sum) : -INFINITY;
      }
      static_for<Tr::kDTiles>([&](auto dn) {
        int const col = decltype(dn)::value * 8;
        *reinterpret_cast<uint32_t*>(sQ + tile_offset<C.B_r, C.swizzled>(row, col) + 2 * t) =
            ptx::pack2<T>(o_acc[mt][dn][2 * kH], o_acc[mt][dn][2 * kH + 1]);
      });
    });
  });
  __syncthreads();  // O rows are written per warp and read back by every thread
  constexpr int kPasses = C.B_r / Tr::kCopyRows;
  int const row0 = tid / 8;
  int const col0 = (tid % 8) * 8;
  uint32_t const src = ptx::smem_addr(sQ) + 2 * tile_offset<C.B_r, C.swizzled>(row0, col0);
  static_for<Tr::kSlabs>([&](auto s) {
    static_for<kPasses>([&](auto i) {
      constexpr int kRow = decltype(i)::value * Tr::kCopyRows;
      constexpr int kCol = decltype(s)::value * 64;
      if (row0 + kRow < q_rows) {
        *reinterpret_cast<uint4*>(gO + (row0 + kRow) * p.o_seq_stride + kCol + col0) =
            ptx::ld_shared_16(src + 2 * (kCol / 64 * C.B_r * 64 + kRow * 64));
      }
    });
  });
}

template <class Tag>
__global__ void __launch_bounds__(Traits<Tag::kConfig>::kThreads)
    forward_kernel(__grid_constant__ ForwardParams const p) {
  forward_block<Tag::kConfig>(p);
}

template <KernelConfig C>
cudaError_t prepare_kernel() {
  if constexpr (Traits<C>::kSmemBytes > 48 * 1024) {
    return cudaFuncSetAttribute(forward_kernel<ConfigTag<C>>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                Traits<C>::kSmemBytes);
  } else {
    return cudaSuccess;
  }
}

template <KernelConfig C>
cudaError_t kernel_attributes(cudaFuncAttributes* out) {
  return cudaFuncGetAttributes(out, forward_kernel<ConfigTag<C>>);
}

template <KernelConfig C>
cudaError_t launch_kernel(ForwardParams const& params, dim3 grid, cudaStream_t stream) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(Traits<C>::kThreads);
  config.dynamicSmemBytes = Traits<C>::kSmemBytes;
  config.stream = stream;
  return cudaLaunchKernelEx(&config, forward_kernel<ConfigTag<C>>, params);
}

// Instantiates the kernel for C and adds it to the registry (called from the generated files).
template <KernelConfig C>
void register_kernel(Registry& registry) {
  registry.emplace(C, KernelEntry{C, &prepare_kernel<C>, &kernel_attributes<C>, &launch_kernel<C>});
}

}  // namespace fa::cuda
