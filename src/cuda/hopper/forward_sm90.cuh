// The Hopper (sm_90a) forward kernel: a producer warp streams Q, K and V tiles by TMA into
// 128-byte-swizzled shared memory through a multi-stage mbarrier pipeline; consumer warpgroups,
// 64 query rows each, compute S = Q K^T with wgmma from shared memory, run the online softmax in
// fp32 on the accumulator layout, and accumulate O += P V with P kept in registers (the
// accumulator layout of S is the A-operand layout of the next wgmma, so P needs no shuffle).
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/forward_params.hpp"
#include "cuda/hopper/ptx_sm90.cuh"
#include "cuda/hopper/wgmma_sm90.cuh"

namespace fa::cuda::sm90 {

// Everything a launch reads: the three tensor maps (built on the host per run; 128 bytes each,
// 64-byte aligned, passed as a __grid_constant__ parameter so TMA reads them in place) and the
// common forward parameters.
struct Params {
  CUtensorMap q_map;  // 4-D {head_dim, seqlen_q, heads_q, batch}, box {64, B_r, 1, 1}
  CUtensorMap k_map;  // 4-D {head_dim, seqlen_k, heads_kv, batch}, box {64, B_c, 1, 1}
  CUtensorMap v_map;
  ForwardParams p;
};

template <DType kType_, int kD_, int kBc_, int kStages_, int kConsumers_, bool kOverlap_>
struct Tile {
  static constexpr DType kType = kType_;
  using Elem = std::conditional_t<kType == DType::kBF16, __nv_bfloat16, __half>;
  static constexpr int kD = kD_;
  static constexpr int kBc = kBc_;
  static constexpr int kStages = kStages_;
  static constexpr int kConsumers = kConsumers_;  // consumer warpgroups, 64 query rows each
  // Softmax of one key block overlapped with the tensor cores' Q K^T of the next and P V of the
  // previous one (FA3's intra-warpgroup pipelining); else each block's three steps in turn.
  static constexpr bool kOverlap = kOverlap_;
  static constexpr int kBr = 64 * kConsumers;
  static constexpr int kThreads = 128 * (kConsumers + 1);
  // Shared memory: tiles stored as kD / 64 column blocks of rows x 128 bytes (the SWIZZLE_128B
  // atom is 8 rows x 128 bytes, so every block starts 1024-byte aligned).
  static constexpr int kQBytes = kBr * kD * 2;
  static constexpr int kKVBytes = kBc * kD * 2;
  static constexpr int kBarrierBytes = 8 * (1 + 4 * kStages);
  static constexpr int kSmemBytes = 1024 /* alignment slack */ + kQBytes +
                                    2 * kStages * kKVBytes + kBarrierBytes;
  // Registers per thread after reallocation: the producer warpgroup gives its share to the
  // consumers (128 * 24 + 256 * 240 = 64512 of 65536 with two consumers).
  static constexpr int kProducerRegs = kConsumers == 1 ? 56 : kConsumers == 2 ? 24 : 32;
  static constexpr int kConsumerRegs = kConsumers == 1 ? 256 : kConsumers == 2 ? 240 : 160;

  static_assert(kD % 64 == 0 && kD <= 256, "head_dim in 64-column swizzle blocks");
  static_assert(kBc % 16 == 0 && kBc <= 256, "keys per block: a k16 step of P V at a time");
  static_assert(kSmemBytes <= 227 * 1024, "Hopper's shared memory per block");
};

namespace detail {

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

}  // namespace detail

template <class T>
__global__ void __launch_bounds__(T::kThreads, 1) forward_kernel(__grid_constant__ Params const params) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  ForwardParams const& p = params.p;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* q_tile = smem;
  uint8_t* k_tiles = q_tile + T::kQBytes;
  uint8_t* v_tiles = k_tiles + T::kStages * T::kKVBytes;
  uint64_t* bars = reinterpret_cast<uint64_t*>(v_tiles + T::kStages * T::kKVBytes);
  uint64_t* q_full = bars;
  uint64_t* k_full = bars + 1;
  uint64_t* k_empty = k_full + T::kStages;
  uint64_t* v_full = k_empty + T::kStages;
  uint64_t* v_empty = v_full + T::kStages;

  // Block order: heaviest query blocks first (the last ones under a causal mask).
  int64_t const block = blockIdx.x;
  int const n_m = p.n_q_blocks;
  int const m_block = n_m - 1 - int(block % n_m);
  int const head = int((block / n_m) % p.heads_q);
  int const batch = int(block / (int64_t(n_m) * p.heads_q));
  int const kv_head = head / p.q_heads_per_kv;
  int const sq = p.seqlen_q, sk = p.seqlen_k;

  // Key blocks this query block sees, [n_begin, n_begin + n_blocks): from the first key its
  // first row sees to the last key its last row sees. Walked last to first.
  int64_t const first_row = int64_t(m_block) * T::kBr;
  int64_t const last_row = min(first_row + T::kBr, int64_t(sq)) - 1;
  int64_t const key_end = min(int64_t(sk), last_row + sk - sq + p.window_right + 1);
  int64_t const key_begin = max(int64_t(0), first_row + sk - sq - p.window_left);
  int const n_begin = int(key_begin / T::kBc);
  int const n_blocks =
      key_end <= key_begin ? 0 : int((key_end + T::kBc - 1) / T::kBc) - n_begin;

  int const tid = threadIdx.x;
  if (tid == 0) {
    mbar_init(q_full, 1);
    for (int s = 0; s < T::kStages; ++s) {
      mbar_init(&k_full[s], 1);
      mbar_init(&v_full[s], 1);
      mbar_init(&k_empty[s], 4 * T::kConsumers);  // one arrival per consumer warp
      mbar_init(&v_empty[s], 4 * T::kConsumers);
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (tid < 128) {
    // Producer warpgroup: one thread issues every copy; the others only give registers back.
    regs_dealloc<T::kProducerRegs>();
    if (tid == 0) {
      tma_prefetch_map(&params.q_map);
      tma_prefetch_map(&params.k_map);
      tma_prefetch_map(&params.v_map);
      if (n_blocks > 0) {
        mbar_arrive_expect_tx(q_full, T::kQBytes);
        for (int cb = 0; cb < T::kD / 64; ++cb) {
          tma_load_4d(q_tile + cb * T::kBr * 128, &params.q_map, q_full, cb * 64,
                      m_block * T::kBr, head, batch);
        }
      }
      for (int it = 0; it < n_blocks; ++it) {
        int const n = n_begin + n_blocks - 1 - it;
        int const s = it % T::kStages;
        uint32_t const phase = (it / T::kStages) & 1;
        mbar_wait(&k_empty[s], phase ^ 1);
        mbar_arrive_expect_tx(&k_full[s], T::kKVBytes);
        uint8_t* k_dst = k_tiles + s * T::kKVBytes;
        for (int cb = 0; cb < T::kD / 64; ++cb) {
          tma_load_4d(k_dst + cb * T::kBc * 128, &params.k_map, &k_full[s], cb * 64, n * T::kBc,
                      kv_head, batch);
        }
        mbar_wait(&v_empty[s], phase ^ 1);
        mbar_arrive_expect_tx(&v_full[s], T::kKVBytes);
        uint8_t* v_dst = v_tiles + s * T::kKVBytes;
        for (int cb = 0; cb < T::kD / 64; ++cb) {
          tma_load_4d(v_dst + cb * T::kBc * 128, &params.v_map, &v_full[s], cb * 64, n * T::kBc,
                      kv_head, batch);
        }
      }
    }
    return;
  }

  regs_alloc<T::kConsumerRegs>();
  int const wg = tid / 128 - 1;  // consumer warpgroup
  int const warp = (tid / 32) % 4, lane = tid % 32;
  int const r0 = 16 * warp + lane / 4;  // this thread's rows in the warpgroup: r0 and r0 + 8
  int64_t const row0 = int64_t(m_block) * T::kBr + wg * 64 + r0;
  int64_t const diag0 = row0 + sk - sq;  // key index on the diagonal of row0
  int64_t const wg_diag = int64_t(m_block) * T::kBr + wg * 64 + sk - sq;  // of its first row

  float o[T::kD / 2];
#pragma unroll
  for (int i = 0; i < T::kD / 2; ++i) o[i] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.f, 0.f};
  float const c = p.score_scale_log2;

  if (n_blocks > 0) mbar_wait(q_full, 0);
  uint32_t const q_base = smem_addr(q_tile) + wg * 64 * 128;

  // Pipeline position of the it-th key block (walked last to first): its stage and phase.
  auto stage_of = [](int it) { return it % T::kStages; };
  auto phase_of = [](int it) { return uint32_t(it / T::kStages) & 1; };
  auto key_block = [&](int it) { return n_begin + n_blocks - 1 - it; };

  // Issues S = Q K^T for key block `it` into `sc` (committed, not waited for).
  auto issue_qk = [&](int it, float(&sc)[T::kBc / 2]) {
    int const s = stage_of(it);
    uint32_t const k_base = smem_addr(k_tiles + s * T::kKVBytes);
    mbar_wait(&k_full[s], phase_of(it));
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < T::kD / 16; ++kk) {
      uint64_t const da = make_desc_sw128(q_base + (kk / 4) * T::kBr * 128 + (kk % 4) * 32, 16, 1024);
      uint64_t const db = make_desc_sw128(k_base + (kk / 4) * T::kBc * 128 + (kk % 4) * 32, 16, 1024);
      Wgmma<T::kType, T::kBc, Operands::kSS, 0>::run(sc, da, db, kk > 0);
    }
    wgmma_commit();
  };
  // Issues O += P V for key block `it` (committed, not waited for).
  auto issue_pv = [&](int it, uint32_t const(&pk)[T::kBc / 4]) {
    int const s = stage_of(it);
    uint32_t const v_base = smem_addr(v_tiles + s * T::kKVBytes);
    mbar_wait(&v_full[s], phase_of(it));
    wgmma_fence();
    fence_operands(o);
#pragma unroll
    for (int kk = 0; kk < T::kBc / 16; ++kk) {
      uint32_t const a[4] = {pk[4 * kk], pk[4 * kk + 1], pk[4 * kk + 2], pk[4 * kk + 3]};
      uint64_t const db = make_desc_sw128(v_base + kk * 2048, T::kBc * 128, 1024);
      Wgmma<T::kType, T::kD, Operands::kRS, 1>::run(o, a, db, 1);
    }
    wgmma_commit();
  };
  // Masks block `it`'s scores and turns them into unnormalised probabilities in place, updating
  // the row statistics; returns in `rescale` the factor O must be multiplied by before this
  // block's P V is added.
  auto softmax = [&](int it, float(&sc)[T::kBc / 2], float(&rescale)[2]) {
    // Mask: keys past the sequence, and outside each row's window (causal caps its right
    // bound at the diagonal). Blocks clear of every bound of this warpgroup's 64 rows skip it.
    int64_t const key0 = int64_t(key_block(it)) * T::kBc;
    if (key0 + T::kBc > sk || key0 + T::kBc - 1 > wg_diag + p.window_right ||
        key0 < wg_diag + 63 - p.window_left) {
#pragma unroll
      for (int i = 0; i < T::kBc / 2; ++i) {
        int64_t const key = key0 + 8 * (i / 4) + 2 * (lane % 4) + (i & 1);
        int64_t const diag = diag0 + ((i & 2) ? 8 : 0);
        bool const visible = key < sk && key <= diag + p.window_right && key >= diag - p.window_left;
        if (!visible) sc[i] = -INFINITY;
      }
    }
    // The two rows this thread holds: values i with (i & 2) == 0 belong to row r0.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = row_max[r];
#pragma unroll
      for (int i = 0; i < T::kBc / 2; ++i) {
        if (((i >> 1) & 1) == r) mx = fmaxf(mx, sc[i]);
      }
      mx = detail::quad_max(mx);
      float const use = mx == -INFINITY ? 0.f : mx;
      rescale[r] = exp2f((row_max[r] - use) * c);
      row_max[r] = mx;
      float sum = 0.f;
#pragma unroll
      for (int i = 0; i < T::kBc / 2; ++i) {
        if (((i >> 1) & 1) == r) {
          sc[i] = exp2f(sc[i] * c - use * c);
          sum += sc[i];
        }
      }
      row_sum[r] = row_sum[r] * rescale[r] + sum;
    }
  };
  auto rescale_o = [&](float const(&rescale)[2]) {
#pragma unroll
    for (int i = 0; i < T::kD / 2; ++i) o[i] *= rescale[(i >> 1) & 1];
  };
  auto to_p = [&](float const(&sc)[T::kBc / 2], uint32_t(&pk)[T::kBc / 4]) {
#pragma unroll
    for (int i = 0; i < T::kBc / 4; ++i) {
      pk[i] = ptx::pack2<typename T::Elem>(sc[2 * i], sc[2 * i + 1]);
    }
  };
  auto release = [&](uint64_t* empty, int it) {
    if (lane == 0) mbar_arrive(&empty[stage_of(it)]);  // one arrival per warp
  };

  if constexpr (T::kOverlap) {
    // Intra-warpgroup overlap: while the tensor cores run block it's P V and block it + 1's
    // Q K^T, this warpgroup's threads run block it + 1's softmax.
    if (n_blocks > 0) {
      float sc[T::kBc / 2];
      uint32_t pk[T::kBc / 4];
      float rescale[2];
      issue_qk(0, sc);
      wgmma_wait<0>();
      fence_operands(sc);
      release(k_empty, 0);
      softmax(0, sc, rescale);
      to_p(sc, pk);
      for (int it = 0; it + 1 < n_blocks; ++it) {
        issue_qk(it + 1, sc);
        issue_pv(it, pk);
        wgmma_wait<1>();  // Q K^T of block it + 1 is done; P V of block it may still run
        fence_operands(sc);
        release(k_empty, it + 1);
        softmax(it + 1, sc, rescale);
        wgmma_wait<0>();  // P V of block it is done: its P registers and V stage are free
        fence_operands(o);
        release(v_empty, it);
        rescale_o(rescale);
        to_p(sc, pk);
      }
      issue_pv(n_blocks - 1, pk);
      wgmma_wait<0>();
      fence_operands(o);
      release(v_empty, n_blocks - 1);
    }
  } else {
    for (int it = 0; it < n_blocks; ++it) {
      float sc[T::kBc / 2];
      uint32_t pk[T::kBc / 4];
      float rescale[2];
      issue_qk(it, sc);
      wgmma_wait<0>();
      fence_operands(sc);
      release(k_empty, it);
      softmax(it, sc, rescale);
      rescale_o(rescale);
      to_p(sc, pk);
      issue_pv(it, pk);
      wgmma_wait<0>();
      fence_operands(o);
      release(v_empty, it);
    }
  }

  // Epilogue: normalise, write O (a row with no visible key gets 0) and the natural-log LSE.
  using Elem = typename T::Elem;
  Elem* o_ptr = static_cast<Elem*>(p.o);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float const sum = detail::quad_sum(row_sum[r]);
    float const inv = sum > 0.f ? 1.f / sum : 0.f;
    int64_t const row = row0 + 8 * r;
    if (row >= sq) continue;
    Elem* out = o_ptr + batch * p.o_batch_stride + row * p.o_seq_stride + head * p.o_head_stride;
#pragma unroll
    for (int j = 0; j < T::kD / 8; ++j) {
      uint32_t const v = ptx::pack2<Elem>(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv);
      *reinterpret_cast<uint32_t*>(out + 8 * j + 2 * (lane % 4)) = v;
    }
    if (p.lse != nullptr && lane % 4 == 0) {
      float const lse = sum > 0.f ? (row_max[r] * c + log2f(sum)) * 0.69314718055994531f : -INFINITY;
      p.lse[(int64_t(batch) * p.heads_q + head) * sq + row] = lse;
    }
  }
#endif
}

}  // namespace fa::cuda::sm90
