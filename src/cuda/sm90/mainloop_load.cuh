// The sm90 family's producer: the producer warpgroup's first warp streams each tile's Q and its
// key blocks' K and V by TMA into the pipeline's stages (Smem), waiting on a stage's "empty"
// barrier before reusing it and arming its "full" barrier with the bytes it brings.
//
// A paged KV cache is read through maps over its page pool ({head_dim, page_size, heads_kv,
// num_pages}) in boxes of Params::kv_box_rows = gcd(B_c, page_size) rows: every box of a key
// block then lies within one page (B_c and page_size are multiples of it), and lane i of the warp
// loads box i from the page the block table names. Only the producer changes: the stages hold
// the same swizzled tiles as for a contiguous cache, because a box of a multiple of 8 rows lands
// on a 1024-byte boundary, where the 128-byte swizzle pattern restarts (family.cpp refuses page
// sizes whose boxes would not).
#pragma once

#include <cstdint>

#include "cuda/forward_params.hpp"
#include "cuda/sm90/ptx_sm90.cuh"
#include "cuda/sm90/tile.cuh"
#include "cuda/sm90/tile_scheduler.cuh"

namespace fa::cuda::sm90 {

// Run by the 32 lanes of one warp: every lane waits on the barriers, lane 0 arms them and issues
// the dense copies, the lanes with a paged box issue one copy each per 64 columns. (A box's bytes
// may complete on a "full" barrier before lane 0 arms it: the barrier's transaction count goes
// negative meanwhile, and its phase waits for lane 0's arrival either way.)
template <class T>
__device__ __forceinline__ void load_tiles(Params const& params, Smem<T> const& sm,
                                           TileScheduler<T> const& sched, int lane) {
  ForwardParams const& p = params.p;
  bool const leader = lane == 0;
  if (leader) {
    tma_prefetch_map(&params.q_map);
    tma_prefetch_map(&params.k_map);
    tma_prefetch_map(&params.v_map);
  }
  bool const paged = p.layout == kLayoutPagedKv;
  int const box = params.kv_box_rows;
  int64_t pipe = 0, q_round = 0;
  for (int64_t round = 0; round < sched.rounds; ++round) {
    int64_t const tile = sched.tile(round);
    if (tile >= sched.n_tiles) break;
    Work const w = work_of<T>(params, tile);
    if (w.n_blocks == 0) continue;
    int const kv_head = w.head / p.q_heads_per_kv;
    mbar_wait(sm.q_empty, (q_round & 1) ^ 1);
    ++q_round;
    if (leader) {
      mbar_arrive_expect_tx(sm.q_full, T::kQBytes);
      for (int cb = 0; cb < T::kD / 64; ++cb) {
        tma_load_4d(sm.q_tile + cb * T::kBr * 128, &params.q_map, sm.q_full, cb * 64,
                    int(w.seq.q_first) + w.m_block * T::kBr, w.head, w.map_batch);
      }
    }
    // This lane's box of key block n in a paged cache: its page and its first row there. A box
    // that starts past the sequence's keys (or a lane past the block's boxes) reads page
    // num_pages, past the map: TMA fills it with zeros and the table's padding is never read.
    // Table entries are clamped into [0, num_pages), never trusted.
    int32_t const* table = p.block_table + int64_t(w.batch) * p.max_pages_per_seq;
    int page = 0, row = 0;
    auto look_up = [&](int n) {
      int const key = n * T::kBc + lane * box;
      page = p.num_pages;
      row = 0;
      if (lane * box < T::kBc && key < w.seq.sk) {
        page = min(max(table[key / p.page_size], 0), p.num_pages - 1);
        row = key % p.page_size;
      }
    };
    // Key block n of K or V into stage s: kD / 64 column blocks of kBc rows x 128 bytes.
    auto load_kv = [&](CUtensorMap const* map, uint8_t* tiles, uint64_t* full, uint64_t* empty,
                       int s, uint32_t phase, int n) {
      mbar_wait(&empty[s], phase ^ 1);
      if (leader) mbar_arrive_expect_tx(&full[s], T::kKVBytes);
      uint8_t* dst = tiles + s * T::kKVBytes;
      if (paged) {
        if (lane * box < T::kBc) {
          for (int cb = 0; cb < T::kD / 64; ++cb) {
            tma_load_4d(dst + (cb * T::kBc + lane * box) * 128, map, &full[s], cb * 64, row,
                        kv_head, page);
          }
        }
      } else if (leader) {
        for (int cb = 0; cb < T::kD / 64; ++cb) {
          tma_load_4d(dst + cb * T::kBc * 128, map, &full[s], cb * 64,
                      int(w.seq.k_first) + n * T::kBc, kv_head, w.map_batch);
        }
      }
    };
    // The next block's page is looked up while this block's copies are in flight, so the
    // table's latency overlaps the wait for a free stage.
    if (paged) look_up(w.n_begin + w.n_blocks - 1);
    for (int it = 0; it < w.n_blocks; ++it, ++pipe) {
      int const n = w.n_begin + w.n_blocks - 1 - it;
      int const s = int(pipe % T::kStages);
      uint32_t const phase = (pipe / T::kStages) & 1;
      load_kv(&params.k_map, sm.k_tiles, sm.k_full, sm.k_empty, s, phase, n);
      load_kv(&params.v_map, sm.v_tiles, sm.v_full, sm.v_empty, s, phase, n);
      if (paged && it + 1 < w.n_blocks) look_up(n - 1);
    }
  }
}

}  // namespace fa::cuda::sm90
