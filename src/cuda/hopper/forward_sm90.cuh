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
#include "cuda/sequence_view.cuh"

namespace fa::cuda::sm90 {

// Everything a launch reads: the three tensor maps (built on the host per run; 128 bytes each,
// 64-byte aligned, passed as a __grid_constant__ parameter so TMA reads them in place) and the
// common forward parameters.
struct Params {
  CUtensorMap q_map;  // 4-D {head_dim, seqlen_q, heads_q, batch}, box {64, B_r, 1, 1}
  CUtensorMap k_map;  // 4-D {head_dim, seqlen_k, heads_kv, batch}, box {64, B_c, 1, 1}
  CUtensorMap v_map;
  ForwardParams p;
  // Tile order: the (batch, head) pairs are walked in groups of `head_group`, and within a group
  // query blocks go from the last (the heaviest under a causal mask) to the first, every pair of
  // the group at one block before the next block. A group's K and V stay in L2 while its tiles
  // run (the launcher sizes it); 1 walks one head's query blocks at a time.
  int64_t head_group;
};

template <DType kType_, int kD_, int kBc_, int kStages_, int kConsumers_, bool kOverlap_,
          bool kPingpong_, bool kPersistent_>
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
  // The two consumer warpgroups take turns issuing wgmma (named barriers 1 and 2), so the tensor
  // cores run one's products while the other runs its softmax (FA3's ping-pong).
  static constexpr bool kPingpong = kPingpong_;
  // One block per SM walks a tile of each round (see forward_kernel): the producer loads the
  // next tile's Q and first K/V blocks while the consumers finish and write the current one.
  static constexpr bool kPersistent = kPersistent_;
  static constexpr int kBr = 64 * kConsumers;
  static constexpr int kThreads = 128 * (kConsumers + 1);
  // Shared memory: tiles stored as kD / 64 column blocks of rows x 128 bytes (the SWIZZLE_128B
  // atom is 8 rows x 128 bytes, so every block starts 1024-byte aligned).
  static constexpr int kQBytes = kBr * kD * 2;
  static constexpr int kKVBytes = kBc * kD * 2;
  static constexpr int kBarrierBytes = 8 * (2 + 4 * kStages);
  static constexpr int kSmemBytes = 1024 /* alignment slack */ + kQBytes +
                                    2 * kStages * kKVBytes + kBarrierBytes;
  // Registers per thread after reallocation: the producer warpgroup gives its share to the
  // consumers (128 * 24 + 256 * 240 = 64512 of 65536 with two consumers).
  static constexpr int kProducerRegs = kConsumers == 1 ? 56 : kConsumers == 2 ? 24 : 32;
  static constexpr int kConsumerRegs = kConsumers == 1 ? 256 : kConsumers == 2 ? 240 : 160;

  static_assert(kD % 64 == 0 && kD <= 256, "head_dim in 64-column swizzle blocks");
  static_assert(kBc % 16 == 0 && kBc <= 256, "keys per block: a k16 step of P V at a time");
  static_assert(kSmemBytes <= 227 * 1024, "Hopper's shared memory per block");
  static_assert(!kPingpong || kConsumers == 2, "ping-pong alternates two warpgroups");
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

// One query tile's work: its coordinates, its sequence (lengths, and first rows in a varlen
// batch, whose tensor maps span the packed rows with a batch extent of 1), and the key blocks it
// sees, [n_begin, n_begin + n_blocks), from the first key its first row sees to the last key its
// last row sees (walked last to first). A tile past its sequence's queries sees none.
struct Work {
  int m_block, head, batch, n_begin, n_blocks;
  int map_batch;  // the tensor maps' batch coordinate
  SequenceView seq;
};

template <class T>
__device__ __forceinline__ Work work_of(Params const& params, int64_t tile) {
  ForwardParams const& p = params.p;
  int64_t const pairs = int64_t(p.heads_q) * p.batch;
  int64_t const group_tiles = params.head_group * p.n_q_blocks;
  int64_t const group = tile / group_tiles;
  int64_t const first_pair = group * params.head_group;
  int64_t const size = min(params.head_group, pairs - first_pair);
  int64_t const within = tile - group * group_tiles;
  int64_t const pair = first_pair + within % size;
  Work w;
  w.m_block = p.n_q_blocks - 1 - int(within / size);
  w.head = int(pair % p.heads_q);
  w.batch = int(pair / p.heads_q);
  w.seq = sequence_view(p, p.layout, w.batch);
  w.map_batch = p.layout == kLayoutVarlen ? 0 : w.batch;
  int64_t const sq = w.seq.sq, sk = w.seq.sk;
  int64_t const first_row = int64_t(w.m_block) * T::kBr;
  int64_t const last_row = min(first_row + T::kBr, sq) - 1;
  int64_t const key_end = min(sk, last_row + sk - sq + p.window_right + 1);
  int64_t const key_begin = max(int64_t(0), first_row + sk - sq - p.window_left);
  w.n_begin = int(key_begin / T::kBc);
  w.n_blocks = first_row >= sq || key_end <= key_begin
                   ? 0
                   : int((key_end + T::kBc - 1) / T::kBc) - w.n_begin;
  return w;
}

// kGeneral adds the score transforms (soft-capping, ALiBi, a negative scale: ForwardParams::
// transform) and attention sinks; the plain instantiation has neither.
template <class T, bool kGeneral>
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
  uint64_t* q_empty = bars + 1;
  uint64_t* k_full = bars + 2;
  uint64_t* k_empty = k_full + T::kStages;
  uint64_t* v_full = k_empty + T::kStages;
  uint64_t* v_empty = v_full + T::kStages;

  // The tiles in order (Params::head_group) are dealt out in rounds of gridDim.x: without
  // `persistent` a block takes one; with it, block b takes position b of every even round and
  // gridDim.x - 1 - b of every odd one. The snake evens out the blocks' sums of work when tiles
  // come heaviest first (causal): plain striding hands block 0 the heaviest tile of every round
  // (on an H200 at d = 256, causal, 16k: 0.52x the speed of one block per tile).
  int64_t const n_tiles = int64_t(p.n_q_blocks) * p.heads_q * p.batch;
  int64_t const grid = gridDim.x;
  int64_t const rounds = T::kPersistent ? (n_tiles + grid - 1) / grid : 1;
  auto tile_of = [&](int64_t round) {
    return round * grid + (round & 1 ? grid - 1 - blockIdx.x : blockIdx.x);
  };
  int const tid = threadIdx.x;
  if (tid == 0) {
    mbar_init(q_full, 1);
    mbar_init(q_empty, 4 * T::kConsumers);  // one arrival per consumer warp
    for (int s = 0; s < T::kStages; ++s) {
      mbar_init(&k_full[s], 1);
      mbar_init(&v_full[s], 1);
      mbar_init(&k_empty[s], 4 * T::kConsumers);
      mbar_init(&v_empty[s], 4 * T::kConsumers);
    }
    mbar_fence_init();
  }
  __syncthreads();

  // Key blocks pass through the stages in one sequence over all of a block's tiles: the
  // pipe-th block (counted by both sides) uses stage pipe % kStages in phase (pipe / kStages) & 1,
  // and the q-th tile with keys uses the Q buffer in phase q & 1.
  if (tid < 128) {
    // Producer warpgroup: one thread issues every copy; the others only give registers back.
    regs_dealloc<T::kProducerRegs>();
    if (tid == 0) {
      tma_prefetch_map(&params.q_map);
      tma_prefetch_map(&params.k_map);
      tma_prefetch_map(&params.v_map);
      int64_t pipe = 0, q_round = 0;
      for (int64_t round = 0; round < rounds; ++round) {
        int64_t const tile = tile_of(round);
        if (tile >= n_tiles) break;
        Work const w = work_of<T>(params, tile);
        if (w.n_blocks == 0) continue;
        int const kv_head = w.head / p.q_heads_per_kv;
        mbar_wait(q_empty, (q_round & 1) ^ 1);
        ++q_round;
        mbar_arrive_expect_tx(q_full, T::kQBytes);
        for (int cb = 0; cb < T::kD / 64; ++cb) {
          tma_load_4d(q_tile + cb * T::kBr * 128, &params.q_map, q_full, cb * 64,
                      int(w.seq.q_first) + w.m_block * T::kBr, w.head, w.map_batch);
        }
        for (int it = 0; it < w.n_blocks; ++it, ++pipe) {
          int const n = w.n_begin + w.n_blocks - 1 - it;
          int const s = int(pipe % T::kStages);
          uint32_t const phase = (pipe / T::kStages) & 1;
          mbar_wait(&k_empty[s], phase ^ 1);
          mbar_arrive_expect_tx(&k_full[s], T::kKVBytes);
          uint8_t* k_dst = k_tiles + s * T::kKVBytes;
          for (int cb = 0; cb < T::kD / 64; ++cb) {
            tma_load_4d(k_dst + cb * T::kBc * 128, &params.k_map, &k_full[s], cb * 64,
                        int(w.seq.k_first) + n * T::kBc, kv_head, w.map_batch);
          }
          mbar_wait(&v_empty[s], phase ^ 1);
          mbar_arrive_expect_tx(&v_full[s], T::kKVBytes);
          uint8_t* v_dst = v_tiles + s * T::kKVBytes;
          for (int cb = 0; cb < T::kD / 64; ++cb) {
            tma_load_4d(v_dst + cb * T::kBc * 128, &params.v_map, &v_full[s], cb * 64,
                        int(w.seq.k_first) + n * T::kBc, kv_head, w.map_batch);
          }
        }
      }
    }
    return;
  }

  regs_alloc<T::kConsumerRegs>();
  int const wg = tid / 128 - 1;  // consumer warpgroup
  int const warp = (tid / 32) % 4, lane = tid % 32;
  int const r0 = 16 * warp + lane / 4;  // this thread's rows in the warpgroup: r0 and r0 + 8
  uint32_t const q_base = smem_addr(q_tile) + wg * 64 * 128;
  float const c = p.score_scale_log2;
  bool const transform = kGeneral && p.transform;

  // Ping-pong turns: warpgroup 0 waits on barrier 1 and hands over on barrier 2, warpgroup 1
  // the other way round (256 threads each: the 128 that wait and the 128 that hand over).
  // Warpgroup 1 gives the first turn away; warpgroup 0 takes the last hand-over after its
  // final tile, so every barrier phase completes before the block exits.
  auto turn_take = [&] {
    if constexpr (T::kPingpong) named_sync(1 + wg, 256);
  };
  auto turn_pass = [&] {
    if constexpr (T::kPingpong) named_arrive(2 - wg, 256);
  };
  if constexpr (T::kPingpong) {
    if (wg == 1) named_arrive(1, 256);
  }

  int64_t pipe = 0, q_round = 0;
  for (int64_t round = 0; round < rounds; ++round) {
    int64_t const tile = tile_of(round);
    if (tile >= n_tiles) break;
    Work const w = work_of<T>(params, tile);
    int const sq = w.seq.sq, sk = w.seq.sk;
    int64_t const row0 = int64_t(w.m_block) * T::kBr + wg * 64 + r0;
    int64_t const diag0 = row0 + sk - sq;  // key index on the diagonal of row0
    int64_t const wg_diag = int64_t(w.m_block) * T::kBr + wg * 64 + sk - sq;  // of its first row

    float o[T::kD / 2];
#pragma unroll
    for (int i = 0; i < T::kD / 2; ++i) o[i] = 0.f;
    float row_max[2] = {-INFINITY, -INFINITY};
    float row_sum[2] = {0.f, 0.f};
    float slope = 0.f;  // ALiBi, in log2 units like the transformed scores
    if (transform && p.alibi != 0) {
      slope = p.alibi_slopes[(p.alibi == 2 ? int64_t(w.batch) * p.heads_q : 0) + w.head] *
              1.4426950408889634f;
    }

    if (w.n_blocks > 0) {
      mbar_wait(q_full, q_round & 1);
      ++q_round;
    }

    // Pipeline position of the it-th key block of this tile (walked last to first).
    auto stage_of = [&](int it) { return int((pipe + it) % T::kStages); };
    auto phase_of = [&](int it) { return uint32_t((pipe + it) / T::kStages) & 1; };
    auto key_block = [&](int it) { return w.n_begin + w.n_blocks - 1 - it; };

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
      // O's rescaling and P's packing are finished before wgmma.fence orders them for the
      // tensor cores (the compiler may not sink them past it).
      fence_operands(o);
      fence_operands(pk);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < T::kBc / 16; ++kk) {
        uint32_t const a[4] = {pk[4 * kk], pk[4 * kk + 1], pk[4 * kk + 2], pk[4 * kk + 3]};
        uint64_t const db = make_desc_sw128(v_base + kk * 2048, T::kBc * 128, 1024);
        Wgmma<T::kType, T::kD, Operands::kRS, 1>::run(o, a, db, 1);
      }
      wgmma_commit();
    };
    // Masks block `it`'s scores and turns them into unnormalised probabilities in place,
    // updating the row statistics; returns in `rescale` the factor O must be multiplied by
    // before this block's P V is added.
    auto softmax = [&](int it, float(&sc)[T::kBc / 2], float(&rescale)[2]) {
      // Mask: keys past the sequence, and outside each row's window (causal caps its right
      // bound at the diagonal). Blocks clear of every bound of this warpgroup's 64 rows skip it.
      int64_t const key0 = int64_t(key_block(it)) * T::kBc;
      if (transform) {
        // log2 e * bias(softcap(scale * s)), the scale of the exponent then being 1; ALiBi's
        // distance |i + sk - sq - j| from each row's diagonal offset within the block.
        float const diag[2] = {float(diag0 - key0), float(diag0 + 8 - key0)};
#pragma unroll
        for (int i = 0; i < T::kBc / 2; ++i) {
          float y = sc[i] * p.softmax_scale;
          if (p.softcap > 0.f) y = p.softcap * tanhf(y * p.inv_softcap);
          y *= 1.4426950408889634f;
          if (p.alibi != 0) {
            int const col = 8 * (i / 4) + 2 * (lane % 4) + (i & 1);
            y -= slope * fabsf(diag[(i >> 1) & 1] - float(col));
          }
          sc[i] = y;
        }
      }
      if (key0 + T::kBc > sk || key0 + T::kBc - 1 > wg_diag + p.window_right ||
          key0 < wg_diag + 63 - p.window_left) {
        // Each row's visible columns of the block as a range [lo, hi], clamped to 32 bits
        // once, so the per-score test is two integer compares (not 64-bit key arithmetic).
        int lo[2], hi[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          int64_t const diag = diag0 + 8 * r - key0;
          int64_t const last = min(diag + p.window_right, int64_t(sk) - 1 - key0);
          hi[r] = int(max(min(last, int64_t(T::kBc)), int64_t(-1)));
          lo[r] = int(max(min(diag - p.window_left, int64_t(T::kBc)), int64_t(0)));
        }
#pragma unroll
        for (int i = 0; i < T::kBc / 2; ++i) {
          int const col = 8 * (i / 4) + 2 * (lane % 4) + (i & 1);
          int const r = (i >> 1) & 1;
          if (col < lo[r] || col > hi[r]) sc[i] = -INFINITY;
        }
      }
      // The two rows this thread holds: values i with (i & 2) == 0 belong to row r0. The scale
      // is folded into one FFMA per score before the MUFU.EX2: 2^(s c - m c).
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = row_max[r];
#pragma unroll
        for (int i = 0; i < T::kBc / 2; ++i) {
          if (((i >> 1) & 1) == r) mx = fmaxf(mx, sc[i]);
        }
        mx = detail::quad_max(mx);
        float const use_c = (mx == -INFINITY ? 0.f : mx) * c;
        rescale[r] = ptx::exp2_approx(fmaf(row_max[r], c, -use_c));
        row_max[r] = mx;
        float sum = 0.f;
#pragma unroll
        for (int i = 0; i < T::kBc / 2; ++i) {
          if (((i >> 1) & 1) == r) {
            sc[i] = ptx::exp2_approx(fmaf(sc[i], c, -use_c));
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
    // Q K^T of block `it` has completed: its K stage is free, and after the tile's last block
    // so is Q (the producer may load the next tile's while this one finishes).
    auto qk_done = [&](int it) {
      release(k_empty, it);
      if (it == w.n_blocks - 1 && lane == 0) mbar_arrive(q_empty);
    };

    if constexpr (T::kOverlap) {
      // Intra-warpgroup overlap: while the tensor cores run block it's P V and block it + 1's
      // Q K^T, this warpgroup's threads run block it + 1's softmax.
      if (w.n_blocks > 0) {
        float sc[T::kBc / 2];
        uint32_t pk[T::kBc / 4];
        float rescale[2];
        turn_take();
        issue_qk(0, sc);
        turn_pass();
        wgmma_wait<0>();
        fence_operands(sc);
        qk_done(0);
        softmax(0, sc, rescale);
        to_p(sc, pk);
        for (int it = 0; it + 1 < w.n_blocks; ++it) {
          turn_take();
          issue_qk(it + 1, sc);
          issue_pv(it, pk);
          turn_pass();
          wgmma_wait<1>();  // Q K^T of block it + 1 is done; P V of block it may still run
          fence_operands(sc);
          qk_done(it + 1);
          softmax(it + 1, sc, rescale);
          wgmma_wait<0>();  // P V of block it is done: its P registers and V stage are free
          fence_operands(o);
          release(v_empty, it);
          rescale_o(rescale);
          to_p(sc, pk);
        }
        turn_take();
        issue_pv(w.n_blocks - 1, pk);
        turn_pass();
        wgmma_wait<0>();
        fence_operands(o);
        release(v_empty, w.n_blocks - 1);
      }
    } else {
      for (int it = 0; it < w.n_blocks; ++it) {
        float sc[T::kBc / 2];
        uint32_t pk[T::kBc / 4];
        float rescale[2];
        turn_take();
        issue_qk(it, sc);
        turn_pass();
        wgmma_wait<0>();
        fence_operands(sc);
        qk_done(it);
        softmax(it, sc, rescale);
        rescale_o(rescale);
        to_p(sc, pk);
        turn_take();
        issue_pv(it, pk);
        turn_pass();
        wgmma_wait<0>();
        fence_operands(o);
        release(v_empty, it);
      }
    }
    pipe += w.n_blocks;

    // Epilogue: normalise, write O (a row with no visible key gets 0) and the natural-log LSE.
    // A sink joins the denominator: l' = l e^(m - M) + e^(sink - M) with M = max(m, sink).
    using Elem = typename T::Elem;
    Elem* o_ptr = static_cast<Elem*>(p.o);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = detail::quad_sum(row_sum[r]);
      float top = sum > 0.f ? row_max[r] * c * 0.69314718055994531f : -INFINITY;  // natural log
      float out_scale = 1.f;
      if (kGeneral && p.sinks != nullptr) {
        float const sink = p.sinks[w.head];
        float const m = top;
        top = fmaxf(m, sink);
        out_scale = m == -INFINITY ? 0.f : __expf(m - top);
        sum = sum * out_scale + (sink == -INFINITY ? 0.f : __expf(sink - top));  // -inf: no sink
      }
      float const inv = sum > 0.f ? out_scale / sum : 0.f;
      int64_t const row = row0 + 8 * r;
      if (row >= sq) continue;
      Elem* out = o_ptr + w.batch * p.o_batch_stride + (w.seq.q_first + row) * p.o_seq_stride +
                  w.head * p.o_head_stride;
#pragma unroll
      for (int j = 0; j < T::kD / 8; ++j) {
        uint32_t const v = ptx::pack2<Elem>(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv);
        *reinterpret_cast<uint32_t*>(out + 8 * j + 2 * (lane % 4)) = v;
      }
      if (p.lse != nullptr && lane % 4 == 0) {
        float const lse = sum > 0.f ? top + logf(sum) : -INFINITY;
        int64_t const at = p.layout == kLayoutVarlen
                               ? int64_t(w.head) * p.total_q + w.seq.q_first + row
                               : (int64_t(w.batch) * p.heads_q + w.head) * p.seqlen_q + row;
        p.lse[at] = lse;
      }
    }
  }
  if constexpr (T::kPingpong) {
    if (wg == 0) named_sync(1, 256);
  }
#endif
}

}  // namespace fa::cuda::sm90
