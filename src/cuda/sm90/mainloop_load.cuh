// The sm90 family's producer: one thread of the producer warpgroup streams each tile's Q and its
// key blocks' K and V by TMA into the pipeline's stages (Smem), waiting on a stage's "empty"
// barrier before reusing it and arming its "full" barrier with the bytes it brings.
#pragma once

#include <cstdint>

#include "cuda/sm90/ptx_sm90.cuh"
#include "cuda/sm90/tile.cuh"
#include "cuda/sm90/tile_scheduler.cuh"

namespace fa::cuda::sm90 {

template <class T>
__device__ __forceinline__ void load_tiles(Params const& params, Smem<T> const& sm,
                                           TileScheduler<T> const& sched) {
  ForwardParams const& p = params.p;
  tma_prefetch_map(&params.q_map);
  tma_prefetch_map(&params.k_map);
  tma_prefetch_map(&params.v_map);
  int64_t pipe = 0, q_round = 0;
  for (int64_t round = 0; round < sched.rounds; ++round) {
    int64_t const tile = sched.tile(round);
    if (tile >= sched.n_tiles) break;
    Work const w = work_of<T>(params, tile);
    if (w.n_blocks == 0) continue;
    int const kv_head = w.head / p.q_heads_per_kv;
    mbar_wait(sm.q_empty, (q_round & 1) ^ 1);
    ++q_round;
    mbar_arrive_expect_tx(sm.q_full, T::kQBytes);
    for (int cb = 0; cb < T::kD / 64; ++cb) {
      tma_load_4d(sm.q_tile + cb * T::kBr * 128, &params.q_map, sm.q_full, cb * 64,
                  int(w.seq.q_first) + w.m_block * T::kBr, w.head, w.map_batch);
    }
    // Key block n of K or V into stage s: kD / 64 boxes of kBc rows x 128 bytes.
    auto load_kv = [&](CUtensorMap const* map, uint8_t* tiles, uint64_t* full, uint64_t* empty,
                       int s, uint32_t phase, int n) {
      mbar_wait(&empty[s], phase ^ 1);
      mbar_arrive_expect_tx(&full[s], T::kKVBytes);
      uint8_t* dst = tiles + s * T::kKVBytes;
      for (int cb = 0; cb < T::kD / 64; ++cb) {
        tma_load_4d(dst + cb * T::kBc * 128, map, &full[s], cb * 64,
                    int(w.seq.k_first) + n * T::kBc, kv_head, w.map_batch);
      }
    };
    for (int it = 0; it < w.n_blocks; ++it, ++pipe) {
      int const n = w.n_begin + w.n_blocks - 1 - it;
      int const s = int(pipe % T::kStages);
      uint32_t const phase = (pipe / T::kStages) & 1;
      load_kv(&params.k_map, sm.k_tiles, sm.k_full, sm.k_empty, s, phase, n);
      load_kv(&params.v_map, sm.v_tiles, sm.v_full, sm.v_empty, s, phase, n);
    }
  }
}

}  // namespace fa::cuda::sm90
