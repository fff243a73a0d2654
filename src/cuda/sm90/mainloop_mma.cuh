// The sm90 family's consumer main loop: one warpgroup's pass over a tile's key blocks, issuing
// S = Q K^T and O += P V on wgmma from the pipeline's stages (Smem), with the softmax between
// them, and releasing each stage when its products are done.
#pragma once

#include <cstdint>

#include "cuda/ptx.cuh"
#include "cuda/sm90/ptx_sm90.cuh"
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

// Runs the key blocks of one tile, n_blocks of them from pipeline position `pipe` (walked last
// to first), accumulating into `o`; softmax(it, sc, rescale) turns block it's scores into
// probabilities in place and says how O is rescaled first. q_base is the warpgroup's Q rows.
template <class T, class Softmax>
__device__ __forceinline__ void consume_tile(Smem<T> const& sm, uint32_t q_base, int64_t pipe,
                                             int n_blocks, int lane, Turns<T> const& turns,
                                             float (&o)[T::kD / 2], Softmax&& softmax) {
  auto stage_of = [&](int it) { return int((pipe + it) % T::kStages); };
  auto phase_of = [&](int it) { return uint32_t((pipe + it) / T::kStages) & 1; };

  // Issues S = Q K^T for key block `it` into `sc` (committed, not waited for).
  auto issue_qk = [&](int it, float(&sc)[T::kBc / 2]) {
    int const s = stage_of(it);
    uint32_t const k_base = smem_addr(sm.k_tiles + s * T::kKVBytes);
    mbar_wait(&sm.k_full[s], phase_of(it));
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
    uint32_t const v_base = smem_addr(sm.v_tiles + s * T::kKVBytes);
    mbar_wait(&sm.v_full[s], phase_of(it));
    // O's rescaling and P's packing are finished before wgmma.fence orders them for the tensor
    // cores (the compiler may not sink them past it).
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
  auto rescale_o = [&](float const(&rescale)[2]) {
#pragma unroll
    for (int i = 0; i < T::kD / 2; ++i) o[i] *= rescale[(i >> 1) & 1];
  };
  // P in registers: the accumulator layout of S is the A-operand layout of P V's wgmma.
  auto to_p = [&](float const(&sc)[T::kBc / 2], uint32_t(&pk)[T::kBc / 4]) {
#pragma unroll
    for (int i = 0; i < T::kBc / 4; ++i) {
      pk[i] = ptx::pack2<typename T::Elem>(sc[2 * i], sc[2 * i + 1]);
    }
  };
  auto release = [&](uint64_t* empty, int it) {
    if (lane == 0) mbar_arrive(&empty[stage_of(it)]);  // one arrival per warp
  };
  // Q K^T of block `it` has completed: its K stage is free, and after the tile's last block so
  // is Q (the producer may load the next tile's while this one finishes).
  auto qk_done = [&](int it) {
    release(sm.k_empty, it);
    if (it == n_blocks - 1 && lane == 0) mbar_arrive(sm.q_empty);
  };

  if constexpr (T::kOverlap) {
    // Intra-warpgroup overlap: while the tensor cores run block it's P V and block it + 1's
    // Q K^T, this warpgroup's threads run block it + 1's softmax.
    if (n_blocks > 0) {
      float sc[T::kBc / 2];
      uint32_t pk[T::kBc / 4];
      float rescale[2];
      turns.take();
      issue_qk(0, sc);
      turns.pass();
      wgmma_wait<0>();
      fence_operands(sc);
      qk_done(0);
      softmax(0, sc, rescale);
      to_p(sc, pk);
      for (int it = 0; it + 1 < n_blocks; ++it) {
        turns.take();
        issue_qk(it + 1, sc);
        issue_pv(it, pk);
        turns.pass();
        wgmma_wait<1>();  // Q K^T of block it + 1 is done; P V of block it may still run
        fence_operands(sc);
        qk_done(it + 1);
        softmax(it + 1, sc, rescale);
        wgmma_wait<0>();  // P V of block it is done: its P registers and V stage are free
        fence_operands(o);
        release(sm.v_empty, it);
        rescale_o(rescale);
        to_p(sc, pk);
      }
      turns.take();
      issue_pv(n_blocks - 1, pk);
      turns.pass();
      wgmma_wait<0>();
      fence_operands(o);
      release(sm.v_empty, n_blocks - 1);
    }
  } else {
    for (int it = 0; it < n_blocks; ++it) {
      float sc[T::kBc / 2];
      uint32_t pk[T::kBc / 4];
      float rescale[2];
      turns.take();
      issue_qk(it, sc);
      turns.pass();
      wgmma_wait<0>();
      fence_operands(sc);
      qk_done(it);
      softmax(it, sc, rescale);
      rescale_o(rescale);
      to_p(sc, pk);
      turns.take();
      issue_pv(it, pk);
      turns.pass();
      wgmma_wait<0>();
      fence_operands(o);
      release(sm.v_empty, it);
    }
  }
}

}  // namespace fa::cuda::sm90
